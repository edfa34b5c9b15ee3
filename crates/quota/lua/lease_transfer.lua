-- lease_transfer: a stream admitted from a lease gets its own hold. Its
-- amounts (what the lease gave it) move from the lease record to a new hold
-- record under its request id: the month's held tokens and cost and the
-- in-flight slots stay as they are, since nothing new is reserved, so no
-- limit can refuse it. From then on the request is a per-request hold
-- (extend, settle, release, the reconciler's orphan rule).
-- Idempotent: a hold already transferred from this lease answers {1}.
-- KEYS: 1 lease record, 2 hold record, 3 open-holds zset
-- ARGV: 1 lease_id, 2 request_id, 3 app, 4 key, 5 est_in, 6 est_out,
--       7 est_cost, 8 model, 9 replica, 10 period
-- Returns: {1}          transferred (now or before)
--          {2, state}   the request id already has a hold of its own
--          {3, state}   the lease is not live (returned or expired)
--          {4}          the lease does not hold that much (a bug upstream)
local L, H, OPEN = KEYS[1], KEYS[2], KEYS[3]
local h = redis.call('HMGET', H, 'st', 'tl')
if h[1] then
  if h[2] == ARGV[1] then return {1} end
  return {2, h[1]}
end
local l = redis.call('HMGET', L, 'st', 'lt', 'lc', 'ls')
if l[1] ~= 'L' then
  return {3, l[1] or 'none'}
end
local function n(v) return tonumber(v) or 0 end
local function int(v) return string.format('%d', v) end
local tok, cost = tonumber(ARGV[5]) + tonumber(ARGV[6]), tonumber(ARGV[7])
local lt, lc, ls = n(l[2]), n(l[3]), n(l[4])
if lt < tok or lc < cost or ls < 1 then
  return {4}
end
redis.call('HSET', L, 'lt', int(lt - tok), 'lc', int(lc - cost), 'ls', int(ls - 1))
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', H, 'st', 'H', 'p', ARGV[10], 'a', ARGV[3], 'k', ARGV[4],
  'ei', ARGV[5], 'eo', ARGV[6], 'ec', ARGV[7], 'm', ARGV[8], 'r', ARGV[9], 'at', now,
  'tl', ARGV[1])
redis.call('ZADD', OPEN, now, ARGV[2])
return {1}
