-- pool_return: give reclaimed (or expired) borrowed tokens back to the pool.
-- KEYS: 1 pool month hash
-- ARGV: 1 reclaim_id, 2 tenant, 3 tokens
-- Returns: {1, lent} returned now, {2} this reclaim id was applied before,
--          {-1} pool unknown (a rebuild from Postgres already counts it)
local P = KEYS[1]
local id, tenant, tokens = ARGV[1], ARGV[2], amount(3)
if redis.call('HEXISTS', P, 'r:' .. id) == 1 then
  return {2}
end
if redis.call('HEXISTS', P, '_rb') == 0 then
  return {-1}
end
local v = redis.call('HMGET', P, 'lent', 'o:' .. tenant)
local lent = math.max(0, (tonumber(v[1]) or 0) - tokens)
local out = math.max(0, (tonumber(v[2]) or 0) - tokens)
redis.call('HSET', P, 'lent', int(lent), 'o:' .. tenant, int(out), 'r:' .. id, '1')
return {1, lent}
