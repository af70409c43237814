-- state.lua: the periodic look at a bulkhead: ends expired leases, puts the
-- counts right (reconcile), serves the queue (a recovery window that ended,
-- permits that expired), and returns {inuse (the capacity leases' use
-- included), queued, swept, recovering ms left, now, waiters of each class,
-- busy}: busy is the per-request permits in use and the waiters in tenants'
-- compartments (0, with nothing queued, no recovery and nothing swept: the
-- replica may look at the bulkhead less often; calm.go).
-- ARGV: 1 recovery ms, 2 adopt ms.

-- reconcile sets the counts to the sets they count, whatever made them
-- drift (a script that ran twice before every script counted once, a hand
-- at redis-cli): inuse is ZCARD P, qN ZCARD QN, qlen their sum, each
-- written only where it differs (a write is replicated). The tenant counts
-- T and TQ are rebuilt from the leases' and waiters' info at most every
-- RECOUNT_MS per bulkhead (whichever replica looks), when the bulkhead has
-- tenants, and while there are at most RECOUNT infos (a bulkhead with more
-- relies on the scripts counting once): reading them costs about 1 us each.
-- The tenants' compartments (TW) have no count of their own (ZLEXCOUNT
-- counts a tenant's range), so nothing of them can drift; TQ counts them
-- among the waiters of W.
local RECOUNT, RECOUNT_MS = 256, 10000

local function recount(counts, infos)
  if redis.call('HLEN', infos) > RECOUNT then return end
  local want = {}
  for _, info in ipairs(redis.call('HVALS', infos)) do
    local _, _, _, _, t = split5(info)
    if t and t ~= '' then want[t] = (want[t] or 0) + 1 end
  end
  local have = redis.call('HGETALL', counts)
  for i = 1, #have, 2 do
    local t, n = have[i], want[have[i]]
    if not n then
      redis.call('HDEL', counts, t)
    elseif num(have[i + 1]) ~= n then
      redis.call('HSET', counts, t, n)
    end
    want[t] = nil
  end
  for t, n in pairs(want) do redis.call('HSET', counts, t, n) end
end

local function reconcile(now)
  local fields = {'inuse', 'q1', 'q2', 'q3', 'qlen', 'rc'}
  local have = redis.call('HMGET', S, unpack(fields))
  local want = {redis.call('ZCARD', P), redis.call('ZCARD', Q1), redis.call('ZCARD', Q2), redis.call('ZCARD', Q3)}
  want[5] = want[2] + want[3] + want[4]
  local fix = {}
  for i = 1, 5 do
    if num(have[i]) ~= want[i] then
      fix[#fix + 1] = fields[i]
      fix[#fix + 1] = want[i]
    end
  end
  local tenants = redis.call('HLEN', T) + redis.call('HLEN', TQ) > 0
  if tenants and now >= num(have[6]) then
    fix[#fix + 1] = 'rc'
    fix[#fix + 1] = now + RECOUNT_MS
    recount(T, I)
    recount(TQ, W)
  end
  -- The capacity leases' sums, from CL (one entry per replica).
  local sums = {0, 0, 0}
  for _, v in ipairs(redis.call('HVALS', CL)) do
    local l = lease_of(v)
    sums[1], sums[2], sums[3] = sums[1] + l.held, sums[2] + l.used, sums[3] + l.want
  end
  local lf = {'leased', 'lused', 'lwant'}
  local lh = redis.call('HMGET', S, unpack(lf))
  for i = 1, 3 do
    if num(lh[i]) ~= sums[i] then
      fix[#fix + 1] = lf[i]
      fix[#fix + 1] = sums[i]
    end
  end
  if #fix > 0 then redis.call('HSET', S, unpack(fix)) end
end

local now = now_ms()
touch(now, tonumber(ARGV[1]), tonumber(ARGV[2]))
local swept = sweep(now)
reconcile(now)
-- A tenant's compartment waits only while its tenant has no free slot:
-- every script that frees one lets the compartment in (pump). A limit that
-- rose (another replica's settings), or counts that reconcile just put
-- right, may leave a slot free: let in the compartments of tenants with
-- room (while there are at most RECOUNT tenants with waiters).
if redis.call('ZCARD', TW) > 0 and redis.call('HLEN', TQ) <= RECOUNT then
  for _, t in ipairs(redis.call('HKEYS', TQ)) do freed[t] = true end
end
pump(now, '')
local st = redis.call('HMGET', S, 'inuse', 'qlen', 'ru', 'q1', 'q2', 'q3', 'lused')
local left = num(st[3]) - now
if left < 0 then left = 0 end
-- In use: the per-request permits and what the capacity leases use.
local busy = num(st[1]) + redis.call('ZCARD', TW)
return {num(st[1]) + num(st[7]), num(st[2]), swept, left, now, num(st[4]), num(st[5]), num(st[6]), busy}
