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
--   TQ  hash  tenant -> waiters
--   EX  zset  tokens whose lease expired, most recent TOMB kept
--   ED  zset  tokens whose lease ended otherwise (or ended after expiring)
--   R   hash  replica -> when it last looked at this bulkhead (ms): who may
--             be admitting its local share while it cannot reach Redis
local S, P, I, Q1, Q2, Q3, W, WD, T, TQ, EX, ED, R =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13]
local Q = {Q1, Q2, Q3}
local QN = {'q1', 'q2', 'q3'}
-- The scripts' result codes (the first element of each answer). Go names
-- each alike in scripts.go (ACQUIRE_GRANTED is acquireGranted, RENEW_LATE is
-- Late, ...): change one side, change the other (TestResultCodesMatchLua).
local ACQUIRE_GRANTED = 1
local ACQUIRE_QUEUED = 2
local ACQUIRE_REJECTED = 3
local RELEASE_RELEASED = 1
local RELEASE_DUPLICATE = 2
local RELEASE_EXPIRED = 3
local RELEASE_UNKNOWN = 4
local RELEASE_WAITER = 5
local RENEW_RENEWED = 1
local RENEW_ADOPTED_EXPIRED = 2
local RENEW_ADOPTED_UNKNOWN = 3
local RENEW_LATE = 4
local RENEW_UNKNOWN = 5
local LEAVE_LEFT = 1
local LEAVE_KEPT = 2
local LEAVE_GIVEN_BACK = 3
local LEAVE_NOT_FOUND = 4
local TOMB = 4096
local SWEEP_BATCH = 256
local SCAN = 64
-- The wake-up channel of replica r is PREFIX .. 'wake:' .. r.
local PREFIX = string.match(S, '^(.-){') or ''

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
-- count (P with I, Q1..Q3 with W): each helper below counts what its ZADD,
-- ZREM, HSETNX or HGET found changed, so a script that runs twice (a client
-- that retries after a lost answer) counts nothing twice. state.lua
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
    tenant_add(T, tenant or '', -1)
  end
  return info
end

-- add_waiter queues token in class c until deadline (ms) with its info,
-- unless it waits already. It returns whether it is new.
local function add_waiter(token, c, info, tenant, deadline)
  if redis.call('HSETNX', W, token, info) == 0 then return false end
  local seq = redis.call('HINCRBY', S, 'seq', 1)
  if redis.call('ZADD', Q[c], seq, token) == 1 then
    redis.call('HINCRBY', S, 'qlen', 1)
    redis.call('HINCRBY', S, QN[c], 1)
  end
  redis.call('ZADD', WD, deadline, token)
  tenant_add(TQ, tenant, 1)
  return true
end

-- drop_waiter removes a queued waiter and returns its info (or false).
local function drop_waiter(token)
  local w = redis.call('HGET', W, token)
  if not w then return false end
  local prio, _, _, _, tenant = split5(w)
  local c = num(prio) + 1
  redis.call('HDEL', W, token)
  redis.call('ZREM', WD, token)
  if redis.call('ZREM', Q[c], token) == 1 then
    redis.call('HINCRBY', S, 'qlen', -1)
    redis.call('HINCRBY', S, QN[c], -1)
  end
  tenant_add(TQ, tenant or '', -1)
  return w
end

-- sweep ends the leases that expired GRACE ms ago or more (scripts.go sets
-- GRACE: a late renewal within it renews) and drops the waiters that
-- outlived their deadline (a replica that died while they waited). It
-- returns, for each lease it ended, when that lease was acquired (ms): the
-- caller counts them as released by TTL.
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
  return acquired
end

-- grant gives token a lease of ttl ms (nothing if it holds one).
local function grant(token, prio, ttl, node, tenant, now)
  return add_lease(token, now + ttl, prio .. '\n' .. now .. '\n0\n' .. node .. '\n' .. tenant, tenant)
end

-- pump hands free permits to waiters: highest class first, FIFO within a
-- class, skipping a waiter whose tenant compartment is full (it waits for
-- its own compartment, as in the in-memory limiter). Ceilings never rise as
-- the class falls, so once a class's ceiling is reached no lower class can
-- be served. A granted waiter's replica is woken on its channel, except
-- self (the caller, who learns it from the script's answer).
local function pump(now, self)
  local st = redis.call('HMGET', S, 'inuse', 'qlen', 'c1', 'c2', 'c3', 'tlim', 'ru')
  local inuse, qlen = num(st[1]), num(st[2])
  if qlen <= 0 or now < num(st[7]) then return 0 end
  local ceil = {num(st[3]), num(st[4]), num(st[5])}
  local tlim = num(st[6])
  local n = 0
  for c = 1, 3 do
    if inuse >= ceil[c] then break end
    local heads = redis.call('ZRANGE', Q[c], 0, SCAN - 1)
    for _, tok in ipairs(heads) do
      if inuse >= ceil[c] then break end
      local w = redis.call('HGET', W, tok)
      local _, ttl, replica, node, tenant = split5(w)
      if tenant == '' or tlim <= 0 or num(redis.call('HGET', T, tenant)) < tlim then
        drop_waiter(tok)
        if grant(tok, c - 1, num(ttl), node, tenant, now) then inuse = inuse + 1 end
        n = n + 1
        if tok ~= self then redis.call('PUBLISH', PREFIX .. 'wake:' .. replica, 'g' .. tok) end
      end
    end
  end
  return n
end

-- settle ends a lease (released, not expired) and serves the queue.
local function settle(token, now)
  local info = end_lease(token)
  tomb(ED, token, now)
  pump(now, '')
  return info
end

-- absent_shares returns how many permits of limit the replicas that stopped
-- looking at this bulkhead (for more than stale ms, less than forget ms ago)
-- may be admitting on their own (ledger.on_unavailable: local_share): each
-- admits at most floor(limit / replicas known): the count a replica cut off
-- divides by (Ledger.Share, from R at its last look). stale <= 0: none.
local function absent_shares(now, limit, stale)
  if stale <= 0 then return 0 end
  local seen = redis.call('HGETALL', R)
  local n, absent = #seen / 2, 0
  if n == 0 then return 0 end
  for i = 2, #seen, 2 do
    if now - num(seen[i]) > stale then absent = absent + 1 end
  end
  return absent * math.floor(limit / n)
end
