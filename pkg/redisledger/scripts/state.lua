-- state.lua: the periodic look at a bulkhead: ends expired leases, serves
-- the queue (a recovery window that ended, permits that expired), and
-- returns {inuse, queued, swept, recovering ms left, now}.
local now = now_ms()
touch(now, tonumber(ARGV[1]), tonumber(ARGV[2]))
local swept = sweep(now)
pump(now, '')
local st = redis.call('HMGET', S, 'inuse', 'qlen', 'ru')
local left = num(st[3]) - now
if left < 0 then left = 0 end
return {num(st[1]), num(st[2]), swept, left, now}
