-- budget_rebuild: restore one budget's used counters (domain::budgets) from
-- the Postgres ledger: its period's hash lost them, or the budget is new.
-- Runs once per budget and period: one that carries its marker is left
-- alone. What is held stays as it is (open holds give it back).
-- KEYS: 1 the period's hash
-- ARGV: 1 field prefix, 2 ttl seconds, 3 used tokens, 4 used cost, 5 requests
-- Returns: 1 rebuilt now, 0 already present
local K, f = KEYS[1], ARGV[1]
if redis.call('HEXISTS', K, f .. ':rb') == 1 then
  return 0
end
redis.call('HSET', K, f .. ':ut', int(amount(3)), f .. ':uc', int(amount(4)), f .. ':uq', int(amount(5)), f .. ':rb', '1')
redis.call('EXPIRE', K, amount(2))
return 1
