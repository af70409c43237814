-- reopen.lua: Redis restarted or failed over (its run id changed), so it
-- may have lost the last writes: grants it no longer holds run uncounted.
-- Pause admissions for recovery ms and adopt unknown tokens for adopt ms,
-- as for a bulkhead whose state was lost. ARGV: 1 recovery ms, 2 adopt ms.
local now = now_ms()
if touch(now, tonumber(ARGV[1]), tonumber(ARGV[2])) == 1 then return 1 end
local st = redis.call('HMGET', S, 'ru', 'au')
redis.call('HSET', S, 'ru', math.max(num(st[1]), now + tonumber(ARGV[1])), 'au', math.max(num(st[2]), now + tonumber(ARGV[2])))
return 1
