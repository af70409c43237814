-- replicas.lua: a replica says it is alive. KEYS[1]: the replicas zset.
-- ARGV: 1 replica id, 2 stale ms. Returns the number of live replicas.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
return redis.call('ZCARD', KEYS[1])
