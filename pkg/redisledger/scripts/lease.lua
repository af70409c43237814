-- lease.lua: a replica's capacity leases (capacity.go), of one bulkhead or
-- of several in one call (a lease-loop round: one call per replica, not
-- per bulkhead): each lease granted, renewed, grown, shrunk or given back
-- as if by a call of its own.
-- KEYS: the keys of each bulkhead, NKEYS of them in common.lua's order.
-- ARGV: 1 replica   2 ttl ms   3 recovery ms   4 adopt ms, then LEASE_ARGS
-- per bulkhead, in the order of its keys:
--   1 epoch   2 seq (per epoch, from 1)
--   3 need: the most the replica may have in use until its next call (its
--     local limit, or its permits in use if more): the lease never falls
--     below it, so that it always counts what the replica may admit
--   4 used: its permits in use now   5 peak: the most in use since its last
--   call   6 overflow: its admissions the lease had no room for since then
--   7 limit   8 leaving (1: the target is 0, the replica stops)
--   9 the smallest lease the replica can use (its reserves leave a
--     best_effort permit in it); a smaller target is 0
--   10 keep ms: how long after its end the lease stays counted here (0 but
--     for a bulkhead whose permits the replica hands Envoys as shares,
--     which an Envoy may use that long after the replica's last word:
--     capacity.go, Shares)
-- Returns one answer per bulkhead, in order, each
-- {code, target, held, ms left, swept, now, waiters in the queue, in use
-- (per request and in the leases), per-request permits in use, recovering
-- ms left, far (1: granted far from the limit, for FAR_LEASE ttls)}:
-- LEASE_HELD (the
-- replica admits alone up to target; held >= target is what Redis counts
-- until the replica gives the rest back at its next call); LEASE_STALE (an
-- older call of the replica, run late: nothing changed); LEASE_LOST (the
-- epoch's lease ended here: the replica starts a new epoch); or
-- {LEASE_FAILED, error}: a command failed for that bulkhead (a key of the
-- wrong type...), which the others' answers do not depend on.
--
-- Idempotent per (replica, bulkhead, epoch): a call run again (seq equal to
-- the stored one: a client that retried after a lost answer) answers as the
-- first run and changes nothing; the held count is set, never added to.
local LEASE_ARGS = 10
-- A lease granted far from the limit lasts FAR_LEASE times the ttl: the
-- replica then renews it about once every FAR_LEASE ttls' worth of ticks
-- less one ttl while its demand holds (capacity.go, steady), and at once
-- when its demand grows, Redis's queue has waiters, or it gives back.
local FAR_LEASE = 2

local function lease(replica, ttl, rcv, adp, now, a)
  local epoch, seq = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local need, used, peak, over = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6])
  local limit, leaving, smallest = tonumber(ARGV[a + 7]), ARGV[a + 8] == '1', tonumber(ARGV[a + 9])
  local keep = math.max(tonumber(ARGV[a + 10]) or 0, 0)
  touch(now, rcv, adp)
  local cfg = redis.call('HMGET', S, 'rcv', 'adp')
  if num(cfg[1]) ~= rcv or num(cfg[2]) ~= adp then redis.call('HSET', S, 'rcv', rcv, 'adp', adp) end
  local swept = sweep(now)

  local cur = redis.call('HGET', CL, replica)
  local old = lease_of(cur)
  if cur then
    if epoch < old.epoch or (epoch == old.epoch and seq < old.seq) then return {LEASE_STALE, 0, 0, 0, swept, now} end
    if epoch == old.epoch and seq == old.seq then
      -- The same call again: its keep is this one's.
      local left = num(redis.call('ZSCORE', CX, replica)) - keep - now
      return {LEASE_HELD, old.target, old.held, math.max(left, 0), swept, now, num(redis.call('HGET', S, 'qlen'))}
    end
  elseif seq > 1 then
    -- Reclaimed (its end passed), or Redis lost it.
    return {LEASE_LOST, 0, 0, 0, swept, now}
  end

  local st = redis.call('HMGET', S, 'inuse', 'qlen', 'leased', 'lwant', 'ru')
  local inreq, queued = num(st[1]), num(st[2])
  local others = num(st[3]) - old.held
  -- Demand: the peak in use, plus the admissions the lease had no room for
  -- (a count over the tick, not a concurrency: at most the peak again, so a
  -- full lease's demand doubles per renewal rather than jumping by a rate).
  local want = peak + math.min(over, math.max(peak, 1))
  local wanted = num(st[4]) - old.want + want
  -- What this replica may hold: the limit less the per-request permits and
  -- the other leases.
  local avail = limit - inreq - others
  local target
  local far = false
  if leaving then
    target = 0
  elseif queued == 0 and now >= num(st[5]) and inreq + 2 * wanted <= limit then
    -- Far from the limit: every replica may hold twice what it wants, and
    -- half of what is left is shared among the leases (the other half stays
    -- free for per-request grants and for replicas that start).
    local n = redis.call('HLEN', CL)
    if not cur then n = n + 1 end
    far = true
    target = 2 * want + math.floor((limit - inreq - 2 * wanted) / (2 * n))
    -- Far from the limit a lease does not shrink by less than half: a
    -- demand that wavers costs no give-back call.
    if old.target > target and old.target <= 2 * target then target = old.target end
  else
    -- Near the limit: what the replica used; the rest is decided per
    -- request, in the global queue. With waiters (or while the bulkhead
    -- recovers) no lease grows: freed capacity goes to the queue.
    target = peak
    if queued > 0 or now < num(st[5]) then target = math.min(used, old.held) end
  end
  target = math.max(math.min(target, avail), 0)
  if target < smallest then target = 0 end
  -- Never below what the replica may have in use: a smaller target is the
  -- replica's new local limit, and it gives back the rest at its next call.
  local held = math.max(target, need)
  local life = ttl
  if far and target > 0 then life = FAR_LEASE * ttl end
  -- The replica admits until now + life (less its drift margin, by its
  -- clock); Redis reclaims the lease keep ms later.
  local exp = now + life + keep
  if leaving and held == 0 then
    end_capacity(replica)
  else
    redis.call('HSET', CL, replica, epoch .. '\n' .. seq .. '\n' .. held .. '\n' .. target .. '\n' .. used .. '\n' .. want)
    redis.call('ZADD', CX, exp, replica)
    if held ~= old.held then redis.call('HINCRBY', S, 'leased', held - old.held) end
    if used ~= old.used then redis.call('HINCRBY', S, 'lused', used - old.used) end
    if want ~= old.want then redis.call('HINCRBY', S, 'lwant', want - old.want) end
  end
  -- Capacity given back goes to the waiters first.
  if held < old.held then pump(now, '') end
  -- The bulkhead's counts, as the ticker's look would find them (calm.go).
  local g = redis.call('HMGET', S, 'qlen', 'inuse', 'lused', 'ru')
  return {LEASE_HELD, target, held, life, swept, now, num(g[1]), num(g[2]) + num(g[3]), num(g[2]), math.max(num(g[4]) - now, 0), far and 1 or 0}
end

local replica, ttl, rcv, adp = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local n = (#ARGV - 4) / LEASE_ARGS
if n < 1 or n ~= math.floor(n) or #KEYS ~= n * NKEYS then
  return redis.error_reply('ERR lease: ' .. #KEYS .. ' keys and ' .. #ARGV .. ' arguments are no whole number of bulkheads')
end
local now = now_ms()
local answers = {}
for i = 1, n do
  bind(i)
  local ok, res = pcall(lease, replica, ttl, rcv, adp, now, 4 + (i - 1) * LEASE_ARGS)
  if not ok then
    res = {LEASE_FAILED, type(res) == 'table' and tostring(res.err) or tostring(res)}
  end
  answers[i] = res
end
return answers
