-- pool_rebuild: restore the pool's month from Postgres (the record of every
-- borrow and reclaim) after Redis lost it. Runs once per loss.
-- KEYS: 1 pool month hash
-- ARGV: 1 ttl seconds, 2 number of tenants n, then n pairs (tenant,
--       outstanding tokens), then ids of reclaims already counted in those
--       amounts (marked applied so they are not returned twice)
-- Returns: 1 rebuilt now, 0 already present
local P = KEYS[1]
if redis.call('HEXISTS', P, '_rb') == 1 then
  return 0
end
redis.call('DEL', P)
local n = tonumber(ARGV[2])
local lent = 0
for i = 0, n - 1 do
  local t, o = ARGV[3 + i * 2], amount(4 + i * 2)
  redis.call('HSET', P, 'o:' .. t, int(o))
  lent = lent + o
end
for i = 3 + n * 2, #ARGV do
  redis.call('HSET', P, 'r:' .. ARGV[i], '1')
end
redis.call('HSET', P, 'lent', int(lent), '_rb', '1')
redis.call('EXPIRE', P, tonumber(ARGV[1]))
return 1
