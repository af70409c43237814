-- release.lua: ends a lease. ARGV: 1 token, 2 recovery ms, 3 adopt ms.
-- Returns {code, info, swept, now}: RELEASE_RELEASED (info: the lease's
-- info), RELEASE_DUPLICATE, RELEASE_EXPIRED (its lease had been reclaimed),
-- RELEASE_UNKNOWN, RELEASE_WAITER: a waiter, taken out of its queue (an Acquire whose answer was lost gives
-- back what its script may hold, queued as well as granted).
local token = ARGV[1]
local now = now_ms()
touch(now, tonumber(ARGV[2]), tonumber(ARGV[3]))
local swept = sweep(now)
if redis.call('ZSCORE', P, token) then
  local info = settle(token, now)
  return {RELEASE_RELEASED, info or '', swept, now}
end
if drop_waiter(token) then
  pump(now, '')
  return {RELEASE_WAITER, '', swept, now}
end
if #swept > 0 then pump(now, '') end
if redis.call('ZSCORE', ED, token) then return {RELEASE_DUPLICATE, '', swept, now} end
if redis.call('ZSCORE', EX, token) then
  -- Ended after its lease was reclaimed: remember the end, so that a late
  -- periodic entry does not adopt it.
  redis.call('ZREM', EX, token)
  tomb(ED, token, now)
  return {RELEASE_EXPIRED, '', swept, now}
end
return {RELEASE_UNKNOWN, '', swept, now}
