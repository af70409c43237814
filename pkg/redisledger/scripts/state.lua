-- state.lua: the periodic look at a bulkhead: ends expired leases, serves
-- the queue (a recovery window that ended, permits that expired), records
-- that this replica reaches Redis, and returns {inuse, queued, swept,
-- recovering ms left, now, waiters of each class}. ARGV: 1 recovery ms, 2 adopt ms, 3 replica,
-- 4 forget ms (a replica not seen for longer is forgotten).
local now = now_ms()
touch(now, tonumber(ARGV[1]), tonumber(ARGV[2]))
redis.call('HSET', R, ARGV[3], now)
local seen = redis.call('HGETALL', R)
for i = 2, #seen, 2 do
  if now - num(seen[i]) > tonumber(ARGV[4]) then redis.call('HDEL', R, seen[i - 1]) end
end
local swept = sweep(now)
pump(now, '')
local st = redis.call('HMGET', S, 'inuse', 'qlen', 'ru', 'q1', 'q2', 'q3')
local left = num(st[3]) - now
if left < 0 then left = 0 end
return {num(st[1]), num(st[2]), swept, left, now, num(st[4]), num(st[5]), num(st[6])}
