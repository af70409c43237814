-- renew.lua: a periodic entry says the request of token still runs.
-- ARGV: 1 token, 2 ttl ms, 3 node, 4 recovery ms, 5 adopt ms,
--       6 the token's tag (permit.TokenTag: whose capacity lease admitted it).
-- Returns {code, info, swept, now}: RENEW_RENEWED, RENEW_ADOPTED_EXPIRED
-- (after its lease expired), RENEW_ADOPTED_UNKNOWN (unknown token, during
-- the adoption window), RENEW_LATE (its request ended),
-- RENEW_UNKNOWN, RENEW_FORWARDED (unknown, passed to the replica whose lease
-- admitted it, as its tag says, or to every replica that holds a capacity
-- lease: one of them may have admitted it).
local token, ttl, node = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local now = now_ms()
touch(now, tonumber(ARGV[4]), tonumber(ARGV[5]))
local swept = sweep(now)
if #swept > 0 then pump(now, '') end
if redis.call('ZSCORE', P, token) then
  redis.call('ZADD', P, 'GT', now + ttl, token)
  local info = redis.call('HGET', I, token)
  if info then
    local p, a, _, n, t = split5(info)
    redis.call('HSET', I, token, p .. '\n' .. a .. '\n' .. now .. '\n' .. n .. '\n' .. t)
  end
  return {RENEW_RENEWED, info or '', swept, now}
end
-- Released (known or not: release.lua leaves a tombstone either way): never
-- adopted.
if redis.call('ZSCORE', ED, token) then return {RENEW_LATE, '', swept, now} end
local code = 0
-- A permit of a lease that still stands is counted by that lease: its
-- holder renews it, even in the adoption window (adopting it here too would
-- count it twice, and keep its lease's permit in use after its request
-- ended until the holder's copy expired).
local mine = owner(ARGV[6])
if redis.call('ZSCORE', EX, token) then
  redis.call('ZREM', EX, token)
  code = RENEW_ADOPTED_EXPIRED
elseif mine then
  forward(WAKE_HEARTBEAT, token, mine)
  return {RENEW_FORWARDED, '', swept, now}
elseif now < num(redis.call('HGET', S, 'au')) then
  code = RENEW_ADOPTED_UNKNOWN
elseif forward(WAKE_HEARTBEAT, token) then
  return {RENEW_FORWARDED, '', swept, now}
else
  return {RENEW_UNKNOWN, '', swept, now}
end
-- Adopted: counted in use at once, past the limit if need be (it runs
-- already), as normal priority and no tenant (the entry carries neither).
add_lease(token, now + ttl, '1\n' .. now .. '\n' .. now .. '\n' .. node .. '\n', '')
return {code, '', swept, now}
