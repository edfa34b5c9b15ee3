-- rebuild: restore a tenant's month from the Postgres ledger after Redis lost
-- it. Runs once: a month that already carries the marker is left alone.
-- Counts that settles wrote while the marker was missing are dropped: their
-- events reach the ledger, which is the source this rebuild reads.
-- KEYS: 1 month hash
-- ARGV: 1 ttl seconds, then field, value pairs (used tokens/cost, overruns)
-- Returns: 1 rebuilt now, 0 already present
local M = KEYS[1]
if redis.call('HEXISTS', M, '_rb') == 1 then
  return 0
end
redis.call('DEL', M)
for i = 2, #ARGV, 2 do
  redis.call('HSET', M, ARGV[i], int(amount(i + 1)))
end
redis.call('HSET', M, '_rb', '1')
redis.call('EXPIRE', M, tonumber(ARGV[1]))
return 1
