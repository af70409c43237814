-- acquire.lua: one arrival. ARGV:
--   1 token   2 prio (0 critical, 1 normal, 2 best_effort)   3 lease ttl ms
--   4 wait ms (how long the caller will wait; <= 0: it will not)
--   5 replica   6 node   7 tenant ('' for none)
--   8..10 ceilings c1..c3   11 max queue   12 tenant limit (0: none)
--   13 tenant max queue   14 max tenants   15 recovery ms   16 adopt ms
--   17 the permits the replica's capacity lease has in use now (its
--      report in CL is older)
-- Returns {code, detail, swept, now}: ACQUIRE_GRANTED; ACQUIRE_QUEUED (detail:
-- ms until the recovery window ends, 0 if none); ACQUIRE_REJECTED (detail:
-- the reason).
local token, prio, ttl, wait = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local replica, node, tenant = ARGV[5], ARGV[6], ARGV[7]
local now = now_ms()
touch(now, tonumber(ARGV[15]), tonumber(ARGV[16]))
-- The settings of the replica that last acquired are what releases serve
-- the queue with; each arrival is judged by its own replica's settings.
local ceils = {tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])}
-- Written only when they changed: one read instead of seven writes (each
-- write is replicated) on every arrival. An arrival that names no tenant
-- carries no tenant settings: the tenant settings stay as the last arrival
-- that named one left them (a limit of 0 would let every tenant's waiters
-- in past their limit).
local cfg = redis.call('HMGET', S, 'cfg', 'tlim', 'tmq', 'maxten')
local tset = ARGV[12] .. ',' .. ARGV[13] .. ',' .. ARGV[14]
if tenant == '' then tset = (cfg[2] or 0) .. ',' .. (cfg[3] or 0) .. ',' .. (cfg[4] or 0) end
local sig = ceils[1] .. ',' .. ceils[2] .. ',' .. ceils[3] .. ',' .. ARGV[11] .. ',' .. tset
if cfg[1] ~= sig then
  redis.call('HSET', S, 'cfg', sig, 'c1', ceils[1], 'c2', ceils[2], 'c3', ceils[3], 'mq', ARGV[11])
  if tenant ~= '' then redis.call('HSET', S, 'tlim', ARGV[12], 'tmq', ARGV[13], 'maxten', ARGV[14]) end
end
local swept = sweep(now)
-- This arrival's script ran already (a client retried it after a lost
-- answer): answer as then, counting nothing again. A token whose release
-- came first (the caller gave up on the answer) is refused.
if redis.call('ZSCORE', P, token) then return {ACQUIRE_GRANTED, 0, swept, now} end
if redis.call('HEXISTS', W, token) == 1 then
  return {ACQUIRE_QUEUED, math.max(num(redis.call('HGET', S, 'ru')) - now, 0), swept, now}
end
if redis.call('ZSCORE', ED, token) then return {ACQUIRE_REJECTED, 'timeout', swept, now} end

local c = prio + 1
local maxq, tlim, tmq, maxten = tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13]), tonumber(ARGV[14])

-- The tenant's compartment first, as in memory (pkg/authz takes the
-- tenant's permit before the bulkhead's): with no free slot of its tenant,
-- an arrival waits in the tenant's compartment, bounded by tmq, and the
-- bulkhead's queue never sees it.
local full = false
if tenant ~= '' then
  local tenant_in, tenant_q = num(redis.call('HGET', T, tenant)), num(redis.call('HGET', TQ, tenant))
  if tenant_in == 0 and tenant_q == 0 and redis.call('HLEN', T) >= maxten then
    return {ACQUIRE_REJECTED, 'queue_full', swept, now}
  end
  if tlim > 0 then
    local mine = slots(tenant)
    if mine < tlim and tenant_q > 0 and blocked(tenant) > 0 then
      -- A slot is free but the compartment waits (the limit rose): let it
      -- in first, as the in-memory tenant limiter serves its queue.
      freed[tenant] = true
      pump(now, '')
      mine = slots(tenant)
    end
    full = mine >= tlim
  end
end

local st = redis.call('HMGET', S, 'inuse', 'qlen', 'q1', 'q2', 'q3', 'ru', 'leased', 'lused')
local inuse, qlen = num(st[1]), num(st[2])
local leased, lused = num(st[7]), num(st[8])
if leased > 0 then
  local mine = redis.call('HGET', CL, replica)
  if mine then lused = lused - lease_of(mine).used + num(ARGV[17]) end
end
local queued = {num(st[3]), num(st[4]), num(st[5])}
local recovering = now < num(st[6])
local left = 0
if recovering then left = num(st[6]) - now end
local info = prio .. '\n' .. ttl .. '\n' .. replica .. '\n' .. node .. '\n' .. tenant

if full then
  if wait <= 0 then
    if tmq == 0 then return {ACQUIRE_REJECTED, 'queue_full', swept, now} end
    return {ACQUIRE_REJECTED, 'timeout', swept, now}
  end
  if blocked(tenant) >= tmq then
    -- Evict the youngest of the compartment's lowest class strictly below
    -- this one: its range's last member.
    local lo, hi = compartment(tenant)
    local m = redis.call('ZREVRANGEBYLEX', TW, hi, lo, 'LIMIT', 0, 1)[1]
    local at = #tkey(tenant) + 1
    if not m or tonumber(string.sub(m, at, at)) <= c then
      return {ACQUIRE_REJECTED, 'queue_full', swept, now}
    end
    shed(string.sub(m, at + 16))
  end
  add_waiter(token, c, info, tenant, now + wait + 1000, true)
  return {ACQUIRE_QUEUED, left, swept, now}
end

-- Granted at once: below the class ceiling, no waiter of this class or a
-- higher one, not recovering (and a slot of its tenant free).
local ahead = 0
for k = 1, c do ahead = ahead + queued[k] end
if not recovering and fits(inuse, leased, lused, ceils[1], ceils[c]) and ahead == 0 then
  grant(token, prio, ttl, node, tenant, now)
  return {ACQUIRE_GRANTED, 0, swept, now}
end
if wait <= 0 then
  if maxq == 0 then return {ACQUIRE_REJECTED, 'queue_full', swept, now} end
  return {ACQUIRE_REJECTED, 'timeout', swept, now}
end
if qlen >= maxq then
  -- Evict the youngest waiter of the lowest class strictly below this one.
  local victim = youngest(c + 1)
  if not victim then return {ACQUIRE_REJECTED, 'queue_full', swept, now} end
  shed(victim)
end
-- A waiter is purged a little after its own deadline: its replica leaves
-- the queue itself unless it died.
add_waiter(token, c, info, tenant, now + wait + 1000, false)
-- A shed waiter freed a slot of its tenant: serve its compartment.
pump(now, token)
if redis.call('ZSCORE', P, token) then return {ACQUIRE_GRANTED, 0, swept, now} end
-- It waits while permits sit unused in capacity leases: recall them.
if leased > lused then recall() end
return {ACQUIRE_QUEUED, left, swept, now}
