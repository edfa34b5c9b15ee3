-- model_acquire: take one of a model pool's concurrent upstream slots,
-- across replicas, keeping every other guarantee holder's unused part free
-- (domain::borrowing::pool_admits is the same rule). The model has its own
-- hash tag; this is a second call next to the tenant's hold, made only for
-- models with a pool capacity.
-- KEYS: 1 slots zset (member "tenant|request_id", score = expiry ms),
--       2 in-flight per tenant hash
-- ARGV: 1 member, 2 tenant, 3 capacity, 4 slot lifetime ms (a slot whose
--       replica died is dropped after it), then pairs (guarantee tenant, slots)
-- Returns: {1, inflight} taken, {2} already held by this member,
--          {0, inflight, reserved} full
local Z, BY = KEYS[1], KEYS[2]
local member, tenant = ARGV[1], ARGV[2]
local capacity, life = tonumber(ARGV[3]), tonumber(ARGV[4])
local now = now_ms()

local old = redis.call('ZRANGEBYSCORE', Z, '-inf', now)
for _, m in ipairs(old) do
  local who = string.match(m, '^(.-)|')
  if who and redis.call('HINCRBY', BY, who, -1) < 0 then redis.call('HSET', BY, who, 0) end
  redis.call('ZREM', Z, m)
end
if redis.call('ZSCORE', Z, member) then
  return {2}
end
local n = redis.call('ZCARD', Z)
local reserved = 0
for i = 5, #ARGV, 2 do
  local g = ARGV[i]
  if g ~= tenant then
    local used = tonumber(redis.call('HGET', BY, g) or '0')
    reserved = reserved + math.max(0, tonumber(ARGV[i + 1]) - used)
  end
end
if n + 1 + reserved > capacity then
  return {0, n, reserved}
end
redis.call('ZADD', Z, now + life, member)
redis.call('HINCRBY', BY, tenant, 1)
return {1, n + 1}
