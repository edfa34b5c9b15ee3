-- day_cost: a tenant's settled cost of one calendar day (platform time), for
-- the daily soft limit. Bumped after each settle of a tenant that has a soft
-- limit; rebuilt from the ledger when missing (marker _rb), so a counter
-- is never started part-way through a day.
-- KEYS: 1 day hash (tenant's hash tag)
-- ARGV: 1 mode ('add' or 'rebuild'), 2 micro-USD, 3 ttl seconds
-- Returns: add: the day's cost after the call, or -1 when the day has no
--          counter (the caller rebuilds it from the ledger plus its event);
--          rebuild: {1, cost} started now, {0, cost} it existed (unchanged)
local D = KEYS[1]
local v = amount(2)
if ARGV[1] == 'rebuild' then
  if redis.call('HEXISTS', D, '_rb') == 0 then
    redis.call('HSET', D, 'uc', int(v), '_rb', '1')
    redis.call('EXPIRE', D, tonumber(ARGV[3]))
    return {1, v}
  end
  return {0, tonumber(redis.call('HGET', D, 'uc'))}
end
if redis.call('HEXISTS', D, '_rb') == 0 then
  return -1
end
local total = clamp(n(redis.call('HGET', D, 'uc')) + v)
redis.call('HSET', D, 'uc', int(total))
return total
