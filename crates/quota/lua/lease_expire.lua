-- lease_expire: the reconciler frees a lease whose replica is gone (or that
-- has not been touched for longer than any replica keeps one): its held
-- tokens, cost and in-flight slots go back to the scopes. Requests the dead
-- replica admitted but never settled are not known here (see docs/leases.md).
-- A batch arriving after this finds the lease expired and is booked in full
-- as overrun, so nothing is double-freed.
-- KEYS: 1 month hash (the lease's period), 2 rate/inflight hash,
--       3 lease record, 4 leases zset
-- ARGV: 1 lease_id
-- Returns: {1, tokens, cost, slots} freed; {2, state} not live: no-op
local M, R, L, LZ = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local h = redis.call('HMGET', L, 'st', 'a', 'k', 'lt', 'lc', 'ls')
if h[1] ~= 'L' then
  redis.call('ZREM', LZ, ARGV[1])
  return {2, h[1] or 'none'}
end
local lt, lc, ls = n(h[4]), n(h[5]), n(h[6])
for _, p in ipairs({'t', 'a:' .. h[2], 'k:' .. h[3]}) do
  local v = redis.call('HMGET', M, p .. ':ht', p .. ':hc')
  redis.call('HSET', M, p .. ':ht', int(math.max(0, n(v[1]) - lt)), p .. ':hc', int(math.max(0, n(v[2]) - lc)))
  local f = n(redis.call('HGET', R, p .. ':if'))
  redis.call('HSET', R, p .. ':if', int(math.max(0, f - ls)))
end
redis.call('HSET', L, 'st', 'X', 'lt', 0, 'lc', 0, 'ls', 0)
redis.call('ZREM', LZ, ARGV[1])
return {1, lt, lc, ls}
