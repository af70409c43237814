-- leave.lua: a waiter stops waiting (max_wait passed, or its Check ended).
-- ARGV: 1 token, 2 keep (1: a permit granted meanwhile is kept: the wait
-- ran out as it was granted; 0: it is given back, nobody will use it).
-- Returns {code}: 1 left the queue; 2 granted meanwhile, kept; 3 granted
-- meanwhile, given back; 4 not found (shed, or purged).
local token = ARGV[1]
local now = now_ms()
if drop_waiter(token) then
  pump(now, '')
  return {1}
end
if redis.call('ZSCORE', P, token) then
  if ARGV[2] == '1' then return {2} end
  settle(token, now)
  return {3}
end
return {4}
