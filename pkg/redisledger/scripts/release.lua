-- release.lua: ends a lease. ARGV: 1 token, 2 recovery ms, 3 adopt ms,
--   4 the token's tag (permit.TokenTag: whose capacity lease admitted it).
-- Returns {code, info, swept, now}: RELEASE_RELEASED (info: the lease's
-- info), RELEASE_DUPLICATE, RELEASE_EXPIRED (its lease had been reclaimed),
-- RELEASE_UNKNOWN, RELEASE_WAITER: a waiter, taken out of its queue (an
-- Acquire whose answer was lost gives back what its script may hold, queued
-- as well as granted), RELEASE_FORWARDED: unknown here, passed to the
-- replica whose lease admitted it (its tag says which), or, when the tag
-- names none, to every replica that holds a capacity lease.
local token = ARGV[1]
local now = now_ms()
touch(now, tonumber(ARGV[2]), tonumber(ARGV[3]))
local swept = sweep(now)
if redis.call('ZSCORE', P, token) then
  local info = settle(token, now)
  return {RELEASE_RELEASED, info or '', swept, now}
end
-- Every release but a duplicate leaves a tombstone in ED, so that a late
-- periodic entry of the token adopts nothing (renew.lua), a late acquire
-- grants nothing (acquire.lua), and the release run again is a duplicate.
if drop_waiter(token) then
  tomb(ED, token, now)
  pump(now, '')
  return {RELEASE_WAITER, '', swept, now}
end
if redis.call('ZSCORE', ED, token) then return {RELEASE_DUPLICATE, '', swept, now} end
if redis.call('ZSCORE', EX, token) then
  -- Ended after its lease was reclaimed.
  redis.call('ZREM', EX, token)
  tomb(ED, token, now)
  return {RELEASE_EXPIRED, '', swept, now}
end
-- Unknown: never granted here, or Redis lost its data since (a request
-- that ended while its bulkhead's state was being rebuilt).
tomb(ED, token, now)
if forward(WAKE_ENDED, token, owner(ARGV[4])) then return {RELEASE_FORWARDED, '', swept, now} end
return {RELEASE_UNKNOWN, '', swept, now}
