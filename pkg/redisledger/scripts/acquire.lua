-- acquire.lua: one arrival. ARGV:
--   1 token   2 prio (0 critical, 1 normal, 2 best_effort)   3 lease ttl ms
--   4 wait ms (how long the caller will wait; <= 0: it will not)
--   5 replica   6 node   7 tenant ('' for none)
--   8..10 ceilings c1..c3   11 max queue   12 tenant limit (0: none)
--   13 tenant max queue   14 max tenants   15 recovery ms   16 adopt ms
--   17 stale ms: with local_share, the shares of replicas absent longer are
--      held back from every ceiling (0: no replica admits alone)
-- Returns {code, detail, swept, now}: ACQUIRE_GRANTED; ACQUIRE_QUEUED (detail:
-- ms until the recovery window ends, 0 if none); ACQUIRE_REJECTED (detail:
-- the reason).
local token, prio, ttl, wait = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local replica, node, tenant = ARGV[5], ARGV[6], ARGV[7]
local now = now_ms()
touch(now, tonumber(ARGV[15]), tonumber(ARGV[16]))
-- The settings of the replica that last acquired are what releases serve
-- the queue with; each arrival is judged by its own replica's settings,
-- less the shares replicas cut off from Redis may be admitting alone.
local held = absent_shares(now, tonumber(ARGV[8]), tonumber(ARGV[17]))
local ceils = {tonumber(ARGV[8]) - held, tonumber(ARGV[9]) - held, tonumber(ARGV[10]) - held}
-- Written only when they changed: one read instead of seven writes (each
-- write is replicated) on every arrival.
local sig = ceils[1] .. ',' .. ceils[2] .. ',' .. ceils[3] .. ',' .. ARGV[11] .. ',' .. ARGV[12] .. ',' .. ARGV[13] .. ',' .. ARGV[14]
if redis.call('HGET', S, 'cfg') ~= sig then
  redis.call('HSET', S, 'cfg', sig, 'c1', ceils[1], 'c2', ceils[2], 'c3', ceils[3], 'mq', ARGV[11],
    'tlim', ARGV[12], 'tmq', ARGV[13], 'maxten', ARGV[14])
end
local swept = sweep(now)
if #swept > 0 then pump(now, '') end
-- This arrival's script ran already (a client retried it after a lost
-- answer): answer as then, counting nothing again. A token whose release
-- came first (the caller gave up on the answer) is refused.
if redis.call('ZSCORE', P, token) then return {ACQUIRE_GRANTED, 0, swept, now} end
if redis.call('HEXISTS', W, token) == 1 then
  return {ACQUIRE_QUEUED, math.max(num(redis.call('HGET', S, 'ru')) - now, 0), swept, now}
end
if redis.call('ZSCORE', ED, token) then return {ACQUIRE_REJECTED, 'timeout', swept, now} end

local c = prio + 1
local st = redis.call('HMGET', S, 'inuse', 'qlen', 'q1', 'q2', 'q3', 'ru')
local inuse, qlen = num(st[1]), num(st[2])
local queued = {num(st[3]), num(st[4]), num(st[5])}
local recovering = now < num(st[6])
local ceil = ceils[c]
local maxq, tlim, tmq, maxten = tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13]), tonumber(ARGV[14])

local tenant_in, tenant_q = 0, 0
if tenant ~= '' then
  tenant_in, tenant_q = num(redis.call('HGET', T, tenant)), num(redis.call('HGET', TQ, tenant))
  if tenant_in == 0 and tenant_q == 0 and redis.call('HLEN', T) >= maxten then
    return {ACQUIRE_REJECTED, 'queue_full', swept, now}
  end
end
local tenant_room = tenant == '' or tlim <= 0 or tenant_in < tlim

-- Granted at once: below the class ceiling, no waiter of this class or a
-- higher one, the tenant's compartment has room, not recovering.
local ahead = 0
for k = 1, c do ahead = ahead + queued[k] end
if not recovering and inuse < ceil and ahead == 0 and tenant_room then
  grant(token, prio, ttl, node, tenant, now)
  return {ACQUIRE_GRANTED, 0, swept, now}
end
if wait <= 0 then
  if maxq == 0 then return {ACQUIRE_REJECTED, 'queue_full', swept, now} end
  return {ACQUIRE_REJECTED, 'timeout', swept, now}
end
if not tenant_room and tenant_q >= tmq then
  return {ACQUIRE_REJECTED, 'queue_full', swept, now}
end
if qlen >= maxq then
  -- Evict the youngest waiter of the lowest class strictly below this one.
  local victim = nil
  for k = 3, c + 1, -1 do
    if queued[k] > 0 then
      victim = redis.call('ZRANGE', Q[k], -1, -1)[1]
      break
    end
  end
  if not victim then return {ACQUIRE_REJECTED, 'queue_full', swept, now} end
  local w = drop_waiter(victim)
  local _, _, vreplica = split5(w)
  redis.call('PUBLISH', PREFIX .. 'wake:' .. vreplica, 's' .. victim)
end
-- A waiter is purged a little after its own deadline: its replica leaves
-- the queue itself unless it died.
add_waiter(token, c, prio .. '\n' .. ttl .. '\n' .. replica .. '\n' .. node .. '\n' .. tenant, tenant, now + wait + 1000)
-- A waiter ahead may be blocked by its tenant only: serve the queue now.
pump(now, token)
if redis.call('ZSCORE', P, token) then return {ACQUIRE_GRANTED, 0, swept, now} end
local left = 0
if recovering then left = num(st[6]) - now end
return {ACQUIRE_QUEUED, left, swept, now}
