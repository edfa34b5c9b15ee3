-- model_release: give a model pool slot back. Idempotent.
-- KEYS: 1 slots zset, 2 in-flight per tenant hash
-- ARGV: 1 member, 2 tenant
-- Returns: 1 released now, 0 not held
local Z, BY = KEYS[1], KEYS[2]
if redis.call('ZREM', Z, ARGV[1]) == 0 then
  return 0
end
if redis.call('HINCRBY', BY, ARGV[2], -1) < 0 then redis.call('HSET', BY, ARGV[2], 0) end
return 1
