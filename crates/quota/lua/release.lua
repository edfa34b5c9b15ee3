-- release: give back a hold that consumed nothing (the upstream refused
-- before generating). The request still counted against its RPM.
-- KEYS: 1 month hash, 2 rate/inflight hash, 3 hold record, 4 open-holds zset
-- ARGV: 1 request_id, 2 app, 3 key, 4..21 limits
-- KEYS 5 (optional): the end user's month hash (when the hold took it)
-- Returns: {1} released now, {2, state} no open hold: no-op
local M, R, H, OPEN = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

local h = redis.call('HMGET', H, 'st', 'ei', 'eo', 'ec', 'u', 'b')
if h[1] ~= 'H' then
  return {2, h[1] or 'none'}
end
local scopes = scopes_of(ARGV[2], ARGV[3])
local limit = limits_at(3)
local est_in, est_out, est_cost = n(h[2]), n(h[3]), n(h[4])
for s = 1, 3 do
  local p = scopes[s]
  if redis.call('HINCRBY', M, p .. ':ht', int(0 - (est_in + est_out))) < 0 then redis.call('HSET', M, p .. ':ht', 0) end
  if redis.call('HINCRBY', M, p .. ':hc', int(0 - est_cost)) < 0 then redis.call('HSET', M, p .. ':hc', 0) end
  if redis.call('HINCRBY', R, p .. ':if', -1) < 0 then redis.call('HSET', R, p .. ':if', 0) end
  local dims = {{5, 'itpm', est_in}, {6, 'otpm', est_out}}
  for _, d in ipairs(dims) do
    local L = limit(s, d[1])
    local f = p .. ':' .. d[2]
    if L >= 0 then
      local cur = tonumber(redis.call('HGET', R, f) or '')
      if cur then redis.call('HSET', R, f, string.format('%.6f', math.min(L, cur + d[3]))) end
    end
  end
end
local EUM = KEYS[5]
if EUM and h[5] then
  if redis.call('HINCRBY', EUM, 'ht', int(0 - (est_in + est_out))) < 0 then redis.call('HSET', EUM, 'ht', 0) end
  if redis.call('HINCRBY', EUM, 'hc', int(0 - est_cost)) < 0 then redis.call('HSET', EUM, 'hc', 0) end
end
for _, b in ipairs(held_budgets(h[6])) do
  local f = b.f
  local v = redis.call('HMGET', b.K, f .. ':ht', f .. ':hc', f .. ':hq')
  redis.call('HSET', b.K, f .. ':ht', int(math.max(0, n(v[1]) - est_in - est_out)),
    f .. ':hc', int(math.max(0, n(v[2]) - est_cost)), f .. ':hq', int(math.max(0, n(v[3]) - 1)))
end
redis.call('HSET', H, 'st', 'R')
redis.call('EXPIRE', H, 86400)
redis.call('ZREM', OPEN, ARGV[1])
return {1}
