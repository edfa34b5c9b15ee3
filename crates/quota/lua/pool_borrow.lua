-- pool_borrow: lend one chunk of the platform pool to a tenant. Runs only
-- when a tenant borrows (never on the per-request path); the pool has its
-- own hash tag, so this script touches one slot.
-- KEYS: 1 pool month hash
-- ARGV: 1 borrow_id, 2 tenant, 3 chunk (most tokens this borrow may take),
--       4 pool monthly tokens, 5 tenant's borrow cap (outstanding tokens)
-- Fields: _rb marker, lent (tokens lent and not returned), o:<tenant>
--         (tenant's outstanding), b:<borrow_id> (tokens granted: the answer
--         a repeated call returns), r:<reclaim_id> (returns applied).
-- Returns: {1, granted, lent, tenant_outstanding}   granted now (may be 0)
--          {2, granted}                             this borrow id was seen
--          {-1}                                     pool unknown: rebuild first
local P = KEYS[1]
local id, tenant = ARGV[1], ARGV[2]
local chunk, total, cap = amount(3), amount(4), amount(5)

local seen = redis.call('HGET', P, 'b:' .. id)
if seen then
  return {2, tonumber(seen)}
end
if redis.call('HEXISTS', P, '_rb') == 0 then
  return {-1}
end
local v = redis.call('HMGET', P, 'lent', 'o:' .. tenant)
local lent, out = tonumber(v[1]) or 0, tonumber(v[2]) or 0
local grant = math.min(chunk, total - lent, cap - out)
if grant < 0 then grant = 0 end
lent, out = lent + grant, out + grant
redis.call('HSET', P, 'lent', int(lent), 'o:' .. tenant, int(out), 'b:' .. id, int(grant))
return {1, grant, lent, out}
