-- leave.lua: a waiter stops waiting (max_wait passed, or its Check ended).
-- ARGV: 1 token, 2 keep (1: a permit granted meanwhile is kept: the wait
-- ran out as it was granted; 0: it is given back, nobody will use it).
-- Returns {code}: LEAVE_LEFT the queue; LEAVE_KEPT a permit granted
-- meanwhile; LEAVE_GIVEN_BACK a permit granted meanwhile; LEAVE_NOT_FOUND
-- (shed, or purged).
local token = ARGV[1]
local now = now_ms()
if drop_waiter(token) then
  pump(now, '')
  return {LEAVE_LEFT}
end
if redis.call('ZSCORE', P, token) then
  if ARGV[2] == '1' then return {LEAVE_KEPT} end
  settle(token, now)
  return {LEAVE_GIVEN_BACK}
end
return {LEAVE_NOT_FOUND}
