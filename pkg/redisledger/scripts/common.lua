-- common.lua: the data model and helpers every script of the ledger shares.
-- The Go side prepends it to each script (one script per operation, loaded
-- once, run by EVALSHA). Every key is of one bulkhead and shares its hash
-- tag, so a script touches one Redis Cluster slot.
--
-- KEYS (in order):
--   S   hash  state: inuse, qlen, q1..q3 (waiters per class), seq, init,
--             ru (recovery until, ms), au (adoption until, ms), the
--             effective settings c1..c3 (class ceilings), mq, tlim, tmq, maxten,
--             rc (when state.lua next recounts the tenants, ms)
--   P   zset  live leases: token -> expiry (ms, Redis clock)
--   I   hash  lease info: token -> prio \n acquired \n renewed \n node \n tenant
--   Q1..Q3 zset  waiters of class critical, normal, best_effort: token -> seq
--   W   hash  waiter info: token -> prio \n ttl \n replica \n node \n tenant
--   WD  zset  waiter deadlines: token -> ms (waiters of a dead replica go)
--   T   hash  tenant -> permits in use
--   TQ  hash  tenant -> waiters (in a class queue or in its compartment)
--   EX  zset  tokens whose lease expired, most recent TOMB kept
--   ED  zset  tokens whose lease ended otherwise (or ended after expiring)
--   TW  zset  tenant compartments: the waiters blocked only by their
--             tenant's limit, all scored 0 and ordered by member, tkey(tenant)
--             .. class (1..3) .. seq (15 digits) .. token, so that a
--             tenant's waiters are one range, highest class first, FIFO
--   TM  hash  token -> its member of TW
--   CL  hash  replica -> its capacity lease (lease.lua, capacity.go):
--             epoch \n seq \n held \n target \n used \n wanted
--   CX  zset  replica -> when its capacity lease ends (ms, Redis clock)
--
-- Capacity leases: a replica may hold a lease of permits of the bulkhead
-- and admit from it alone (capacity.go). S's leased, lused and lwant are
-- the sums over CL of held, used (as each replica last reported) and
-- wanted; lease.lua moves them with CL, state.lua reconciles them. The
-- invariant is inuse + leased <= the limit: a per-request grant needs the
-- limit free of every lease (fits). A lease is reclaimed only after its
-- end on Redis's clock (sweep).
--
-- Tenants, as in memory (pkg/authz takes the tenant's permit before it
-- asks the bulkhead for one): a tenant's slots are its permits in use and
-- its waiters in a class queue, at most its limit (tlim). An arrival whose
-- tenant has no free slot waits in the tenant's compartment (TW, at most
-- tmq of them): it is not in the bulkhead's queue (qlen, max queue) and
-- holds back no arrival of another tenant. When a slot of its tenant frees,
-- the compartment's first waiter takes it and joins the tail of its class
-- queue, as an arrival does, after the class queues were served (pump).
-- Every waiter of a class queue is thus grantable but for the ceilings,
-- and the pump never skips one: each script stays O(what it changes),
-- whatever the number of waiters a tenant blocks. One sorted set for every
-- compartment (a range each) rather than one key per tenant: a script
-- declares every key it touches (Redis Cluster, ElastiCache).
local S, P, I, Q1, Q2, Q3, W, WD, T, TQ, EX, ED, TW, TM, CL, CX =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12],
  KEYS[13], KEYS[14], KEYS[15], KEYS[16]
local Q = {Q1, Q2, Q3}
local QN = {'q1', 'q2', 'q3'}
-- The scripts' result codes (the first element of each answer). Go names
-- each alike in scripts.go (ACQUIRE_GRANTED is acquireGranted, RENEW_LATE is
-- renewLate, ...): change one side, change the other (TestResultCodesMatchLua).
local ACQUIRE_GRANTED = 1
local ACQUIRE_QUEUED = 2
local ACQUIRE_REJECTED = 3
local RELEASE_RELEASED = 1
local RELEASE_DUPLICATE = 2
local RELEASE_EXPIRED = 3
local RELEASE_UNKNOWN = 4
local RELEASE_WAITER = 5
local RELEASE_FORWARDED = 6
local RENEW_RENEWED = 1
local RENEW_ADOPTED_EXPIRED = 2
local RENEW_ADOPTED_UNKNOWN = 3
local RENEW_LATE = 4
local RENEW_UNKNOWN = 5
local RENEW_FORWARDED = 6
local LEAVE_LEFT = 1
local LEAVE_KEPT = 2
local LEAVE_GIVEN_BACK = 3
local LEAVE_NOT_FOUND = 4
local LEASE_HELD = 1
local LEASE_STALE = 2
local LEASE_LOST = 3
local LEASE_FAILED = 4
local TOMB = 4096
local SWEEP_BATCH = 256
-- The wake-up channel of replica r is PREFIX .. 'wake:' .. r; a message is
-- one of these letters and the waiter's token (waiters.go names them alike).
local PREFIX = string.match(S, '^(.-){') or ''
local WAKE_GRANTED = 'g'
local WAKE_SHED = 's'
local WAKE_QUEUE_FULL = 'q'
-- WAKE_RECALL .. bulkhead name: give back your lease's unused permits now
-- (a waiter queued while they sat idle).
local WAKE_RECALL = 'l'
-- WAKE_ENDED / WAKE_HEARTBEAT .. bulkhead name .. '\n' .. token: the end
-- entry, or a periodic one, of a token Redis does not know reached another
-- replica: it may be a permit you admitted from your lease.
local WAKE_ENDED = 'e'
local WAKE_HEARTBEAT = 'h'

-- freed: the tenants that gave back a slot during this script (a lease
-- ended, a waiter left a class queue); pump lets their compartments in.
local freed = {}

local function wake(replica, what, token)
  redis.call('PUBLISH', PREFIX .. 'wake:' .. replica, what .. token)
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function num(v) return tonumber(v) or 0 end

-- touch starts a bulkhead's state when Redis has none: on first use, or
-- after Redis lost its data. Then admissions wait recovery ms and unknown
-- tokens of running requests are adopted for adopt ms (the data plane's
-- heartbeats rebuild the ledger before anyone new is admitted).
local function touch(now, recovery, adopt)
  if redis.call('HSETNX', S, 'init', now) == 1 then
    redis.call('HSET', S, 'ru', now + recovery, 'au', now + adopt, 'inuse', 0, 'qlen', 0,
      'q1', 0, 'q2', 0, 'q3', 0, 'seq', 0)
    return 1
  end
  return 0
end

local function split5(s)
  return string.match(s, '^([^\n]*)\n([^\n]*)\n([^\n]*)\n([^\n]*)\n(.*)$')
end

-- lease_of parses a capacity lease of CL.
local function lease_of(s)
  local e, q, h, g, u, w = string.match(s or '', '^([^\n]*)\n([^\n]*)\n([^\n]*)\n([^\n]*)\n([^\n]*)\n(.*)$')
  return {epoch = num(e), seq = num(q), held = num(h), target = num(g), used = num(u), want = num(w)}
end

-- bulkhead_name is this bulkhead's name, from its keys (the prefix holds no
-- '{').
local function bulkhead_name()
  return string.match(S, '{(.*)}:s$')
end

-- owner returns the replica whose capacity lease's permits carry tag (a
-- token's last 4 bytes in hex, permit.TokenTag: a replica tags the tokens
-- it admits from its lease with the first 8 hex digits of the SHA-1 of its
-- id), if it holds a lease of this bulkhead; nil otherwise (a token that
-- is not a lease's, or whose replica's lease ended here).
local function owner(tag)
  if not tag or tag == '' then return nil end
  for _, r in ipairs(redis.call('HKEYS', CL)) do
    if string.sub(redis.sha1hex(r), 1, 8) == tag then return r end
  end
  return nil
end

-- forward passes an entry of a token Redis does not know (what: WAKE_ENDED
-- or WAKE_HEARTBEAT) to the replica that holds it (to: its owner), or, not
-- knowing whose it is, to every replica that holds a capacity lease of the
-- bulkhead: its permit may be one of those it admitted from its lease
-- (capacity.go, forwarded). It reports whether there was any.
local function forward(what, token, to)
  local holders = to and {to} or redis.call('HKEYS', CL)
  if #holders == 0 then return false end
  local msg = what .. bulkhead_name() .. '\n' .. token
  for _, r in ipairs(holders) do redis.call('PUBLISH', PREFIX .. 'wake:' .. r, msg) end
  return true
end

-- recall asks every replica whose capacity lease has permits unused (as
-- it last reported) to give them back at once, rather than at its next
-- renewal: a waiter queued while they sat idle (capacity.go, recall).
local function recall()
  local name = bulkhead_name()
  local all = redis.call('HGETALL', CL)
  for i = 1, #all, 2 do
    local l = lease_of(all[i + 1])
    if l.held > l.used then redis.call('PUBLISH', PREFIX .. 'wake:' .. all[i], WAKE_RECALL .. name) end
  end
end

-- fits reports whether a per-request grant may be made under class
-- ceiling cc and the limit c1: the limit less every capacity lease
-- (leased) has room, and the class ceiling has room beside what the
-- leases use (lused). With no lease it is inuse < cc, as before leases.
local function fits(inuse, leased, lused, c1, cc)
  return inuse + leased < c1 and inuse + lused < cc
end

-- end_capacity removes replica's capacity lease and its share of the
-- sums, and returns the lease (false if it held none).
local function end_capacity(replica)
  local s = redis.call('HGET', CL, replica)
  redis.call('ZREM', CX, replica)
  if not s then return false end
  redis.call('HDEL', CL, replica)
  local l = lease_of(s)
  -- 0 - x, never -x: Lua's -0 is the string "-0", which HINCRBY refuses
  -- (not an integer), failing the whole script.
  redis.call('HINCRBY', S, 'leased', 0 - l.held)
  redis.call('HINCRBY', S, 'lused', 0 - l.used)
  redis.call('HINCRBY', S, 'lwant', 0 - l.want)
  return l
end

local function tomb(key, token, now)
  redis.call('ZADD', key, now, token)
  redis.call('ZREMRANGEBYRANK', key, 0, -(TOMB + 1))
end

local function tenant_add(key, tenant, d)
  if tenant ~= '' then
    if redis.call('HINCRBY', key, tenant, d) <= 0 then redis.call('HDEL', key, tenant) end
  end
end

-- The counts (inuse, qlen, q1..q3, T, TQ) move only with the sets they
-- count (P with I, Q1..Q3 and TW with W): each helper below counts what its
-- ZADD, ZREM, HSETNX or HGET found changed, so a script that runs twice (a
-- client that retries after a lost answer) counts nothing twice. state.lua
-- reconciles the counts with the sets each tick all the same.

-- add_lease records token's lease until exp with its info, counted in use
-- (and in its tenant's count) unless token held one already. It returns
-- whether the lease is new.
local function add_lease(token, exp, info, tenant)
  if redis.call('ZADD', P, 'NX', exp, token) == 0 then return false end
  redis.call('HSET', I, token, info)
  redis.call('HINCRBY', S, 'inuse', 1)
  tenant_add(T, tenant, 1)
  return true
end

-- end_lease removes a live lease and returns its info (false if token held
-- none).
local function end_lease(token)
  local info = redis.call('HGET', I, token)
  redis.call('HDEL', I, token)
  if redis.call('ZREM', P, token) == 0 then return false end
  redis.call('HINCRBY', S, 'inuse', -1)
  if info then
    local _, _, _, _, tenant = split5(info)
    if tenant and tenant ~= '' then
      tenant_add(T, tenant, -1)
      freed[tenant] = true
    end
  end
  return info
end

-- tkey is a tenant's prefix in TW: its length (3 digits: a tenant value is
-- at most authz.MaxTenantLen bytes), then the tenant, so that no tenant's
-- prefix starts another's.
local function tkey(tenant) return string.format('%03d', #tenant) .. tenant end

-- compartment returns the bounds of tenant's range of TW for ZRANGEBYLEX.
local function compartment(tenant)
  local k = tkey(tenant)
  return '(' .. k, '(' .. k .. '\255'
end

-- blocked returns how many of tenant's waiters wait in its compartment.
local function blocked(tenant)
  local lo, hi = compartment(tenant)
  return redis.call('ZLEXCOUNT', TW, lo, hi)
end

-- slots returns how many slots of its limit tenant holds: its permits in
-- use and its waiters in a class queue.
local function slots(tenant)
  return num(redis.call('HGET', T, tenant)) + num(redis.call('HGET', TQ, tenant)) - blocked(tenant)
end

-- to_queue puts waiter token at the tail of class queue c.
local function to_queue(token, c)
  local seq = redis.call('HINCRBY', S, 'seq', 1)
  if redis.call('ZADD', Q[c], seq, token) == 1 then
    redis.call('HINCRBY', S, 'qlen', 1)
    redis.call('HINCRBY', S, QN[c], 1)
  end
end

-- to_compartment puts waiter token of class c at the tail of tenant's
-- compartment.
local function to_compartment(token, c, tenant)
  local seq = redis.call('HINCRBY', S, 'seq', 1)
  local m = tkey(tenant) .. c .. string.format('%015d', seq) .. token
  redis.call('ZADD', TW, 0, m)
  redis.call('HSET', TM, token, m)
end

-- add_waiter queues token in class c (or, with in_compartment, in its
-- tenant's compartment) until deadline (ms) with its info, unless it waits
-- already. It returns whether it is new.
local function add_waiter(token, c, info, tenant, deadline, in_compartment)
  if redis.call('HSETNX', W, token, info) == 0 then return false end
  if in_compartment then to_compartment(token, c, tenant) else to_queue(token, c) end
  redis.call('ZADD', WD, deadline, token)
  tenant_add(TQ, tenant, 1)
  return true
end

-- unqueue removes waiter token from its class queue or its compartment
-- (leaving W and WD alone) and returns whether it held a slot of its
-- tenant (it was in a class queue).
local function unqueue(token, c)
  local m = redis.call('HGET', TM, token)
  if m then
    redis.call('HDEL', TM, token)
    redis.call('ZREM', TW, m)
    return false
  end
  if redis.call('ZREM', Q[c], token) == 1 then
    redis.call('HINCRBY', S, 'qlen', -1)
    redis.call('HINCRBY', S, QN[c], -1)
  end
  return true
end

-- drop_waiter removes a waiter and returns its info (or false).
local function drop_waiter(token)
  local w = redis.call('HGET', W, token)
  if not w then return false end
  local prio, _, _, _, tenant = split5(w)
  redis.call('HDEL', W, token)
  redis.call('ZREM', WD, token)
  if unqueue(token, num(prio) + 1) and tenant and tenant ~= '' then freed[tenant] = true end
  tenant_add(TQ, tenant or '', -1)
  return w
end

-- grant gives token a lease of ttl ms (nothing if it holds one).
local function grant(token, prio, ttl, node, tenant, now)
  return add_lease(token, now + ttl, prio .. '\n' .. now .. '\n0\n' .. node .. '\n' .. tenant, tenant)
end

-- youngest returns the youngest waiter of the lowest class queue in
-- [lowest, 3] (lowest = c + 1: strictly below class c), or nil.
local function youngest(lowest)
  for k = 3, lowest, -1 do
    local v = redis.call('ZRANGE', Q[k], -1, -1)[1]
    if v then return v end
  end
  return nil
end

-- shed evicts waiter token for an arrival of a higher class.
local function shed(token)
  local w = drop_waiter(token)
  if w then
    local _, _, replica = split5(w)
    wake(replica, WAKE_SHED, token)
  end
end

-- serve hands free permits to the class queues' waiters: highest class
-- first, FIFO within a class. Ceilings never rise as the class falls, so
-- once a class's ceiling is reached no lower class can be served. Each
-- waiter of a class queue holds a slot of its tenant, so it is served
-- without a look at its tenant, except one that a script before this
-- design queued, or whose tenant's limit fell (another replica's
-- settings): its tenant holds its limit in permits, so it moves to its
-- compartment (in memory such a waiter is served, past the new limit).
-- O(waiters served or moved). A granted waiter's replica is woken on its
-- channel, except self (the caller, who learns it from the script's answer).
local function serve(now, self)
  local st = redis.call('HMGET', S, 'inuse', 'qlen', 'c1', 'c2', 'c3', 'tlim', 'ru', 'leased', 'lused')
  local inuse, qlen = num(st[1]), num(st[2])
  if qlen <= 0 or now < num(st[7]) then return 0 end
  local ceil = {num(st[3]), num(st[4]), num(st[5])}
  local tlim = num(st[6])
  local leased, lused = num(st[8]), num(st[9])
  local n = 0
  for c = 1, 3 do
    while fits(inuse, leased, lused, ceil[1], ceil[c]) do
      local tok = redis.call('ZRANGE', Q[c], 0, 0)[1]
      if not tok then break end
      local w = redis.call('HGET', W, tok)
      if not w then
        unqueue(tok, c) -- a set without its info: reconcile puts the counts right
      else
        local _, ttl, replica, node, tenant = split5(w)
        if tenant ~= '' and tlim > 0 and num(redis.call('HGET', T, tenant)) >= tlim then
          unqueue(tok, c)
          to_compartment(tok, c, tenant)
        else
          unqueue(tok, c)
          redis.call('HDEL', W, tok)
          redis.call('ZREM', WD, tok)
          tenant_add(TQ, tenant, -1)
          if grant(tok, c - 1, num(ttl), node, tenant, now) then inuse = inuse + 1 end
          n = n + 1
          if tok ~= self then wake(replica, WAKE_GRANTED, tok) end
        end
      end
    end
  end
  return n
end

-- admit lets the first waiter of tenant's compartment (highest class, FIFO)
-- in when its tenant has a free slot: it takes the slot and arrives at the
-- bulkhead, as in memory a waiter that got its tenant's permit does. It
-- joins the tail of its class queue (pump serves it at once when it may be
-- granted at once); a full queue sheds the youngest waiter of the lowest
-- class strictly below for it or, with none, refuses it (WAKE_QUEUE_FULL),
-- and its slot stays free for the next. It returns whether it moved or
-- removed a waiter (so that the caller tries again).
local function admit(tenant, now)
  local st = redis.call('HMGET', S, 'tlim', 'mq', 'inuse', 'qlen', 'ru', 'c1', 'c2', 'c3', 'q1', 'q2', 'q3', 'leased', 'lused')
  local tlim = num(st[1])
  if tlim <= 0 then tlim = math.huge end
  if slots(tenant) >= tlim then return false end
  local lo, hi = compartment(tenant)
  local m = redis.call('ZRANGEBYLEX', TW, lo, hi, 'LIMIT', 0, 1)[1]
  if not m then return false end
  local at = #tkey(tenant) + 1
  local c, tok = tonumber(string.sub(m, at, at)), string.sub(m, at + 16)
  local w = redis.call('HGET', W, tok)
  if not w then
    unqueue(tok, c) -- a member without its info
    return true
  end
  local ahead = 0
  for k = 1, c do ahead = ahead + num(st[8 + k]) end
  local room = num(st[4]) < num(st[2]) or
    (now >= num(st[5]) and fits(num(st[3]), num(st[12]), num(st[13]), num(st[6]), num(st[5 + c])) and ahead == 0)
  if not room then
    local victim = youngest(c + 1)
    if victim then
      shed(victim)
      room = true
    end
  end
  if room then
    unqueue(tok, c)
    to_queue(tok, c)
  else
    drop_waiter(tok)
    local _, _, replica = split5(w)
    wake(replica, WAKE_QUEUE_FULL, tok)
  end
  return true
end

-- pump serves the class queues, then lets in, one at a time, the
-- compartments of the tenants that freed a slot (a shed waiter frees one
-- of its tenant), serving the queues after each: as in memory, where a
-- tenant's waiter reaches the bulkhead after its tenant's permit was given
-- back, so after the bulkhead's queue was served. It returns how many were
-- granted.
local function pump(now, self)
  local n = serve(now, self)
  local t = next(freed)
  while t do
    if admit(t, now) then n = n + serve(now, self) else freed[t] = nil end
    t = next(freed)
  end
  return n
end

-- sweep ends the leases that expired GRACE ms ago or more (scripts.go sets
-- GRACE: a late renewal within it renews) and drops the waiters that
-- outlived their deadline (a replica that died while they waited), and
-- serves the queue when that freed anything. It returns, for each lease it
-- ended, when that lease was acquired (ms): the caller counts them as
-- released by TTL.
local function sweep(now)
  local gone = redis.call('ZRANGEBYSCORE', P, '-inf', now - GRACE, 'LIMIT', 0, SWEEP_BATCH)
  local acquired = {}
  for i, tok in ipairs(gone) do
    local info = end_lease(tok)
    local _, a = split5(info or '')
    acquired[i] = num(a)
    tomb(EX, tok, now)
  end
  local late = redis.call('ZRANGEBYSCORE', WD, '-inf', now, 'LIMIT', 0, SWEEP_BATCH)
  for _, tok in ipairs(late) do drop_waiter(tok) end
  -- Capacity leases past their end (strictly: the replica stopped
  -- admitting from it before, by its own clock less a drift margin).
  local lapsed = redis.call('ZRANGEBYSCORE', CX, '-inf', '(' .. now, 'LIMIT', 0, SWEEP_BATCH)
  local reclaimed = false
  for _, r in ipairs(lapsed) do
    local l = end_capacity(r)
    if l and l.held > 0 then reclaimed = true end
  end
  if reclaimed then
    -- Requests admitted from it may still run, counted nowhere now: as
    -- after Redis lost its data, admit no one for the recovery window and
    -- adopt their periodic entries (they reach replicas that reach Redis).
    local st = redis.call('HMGET', S, 'ru', 'au', 'rcv', 'adp')
    redis.call('HSET', S, 'ru', math.max(num(st[1]), now + num(st[3])), 'au', math.max(num(st[2]), now + num(st[4])))
  end
  if #acquired > 0 or next(freed) or reclaimed then pump(now, '') end
  return acquired
end

-- settle ends a lease (released, not expired) and serves the queue.
local function settle(token, now)
  local info = end_lease(token)
  tomb(ED, token, now)
  pump(now, '')
  return info
end

-- NKEYS is how many keys a bulkhead has (KEYS above); a script that serves
-- several bulkheads in one call (lease.lua) takes them in groups of NKEYS,
-- in that order, and binds each group in turn.
local NKEYS = 16

-- bind makes the i-th bulkhead's keys (from 1) the ones every helper above
-- works on, with no tenant freed yet: what follows runs as a script of that
-- bulkhead alone.
local function bind(i)
  local k = (i - 1) * NKEYS
  S, P, I, Q1, Q2, Q3, W, WD, T, TQ, EX, ED, TW, TM, CL, CX =
    KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], KEYS[k + 5], KEYS[k + 6], KEYS[k + 7], KEYS[k + 8],
    KEYS[k + 9], KEYS[k + 10], KEYS[k + 11], KEYS[k + 12], KEYS[k + 13], KEYS[k + 14], KEYS[k + 15], KEYS[k + 16]
  Q[1], Q[2], Q[3] = Q1, Q2, Q3
  freed = {}
end
