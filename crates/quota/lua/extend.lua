-- extend: add output to an open hold (a stream running past its slice).
-- The same all-or-nothing checks as hold, for what an extension consumes:
-- monthly tokens and cost, and the output-tokens-per-minute bucket.
-- KEYS: 1 month hash (of the hold's period), 2 rate/inflight hash, 3 hold record
-- ARGV: 1 request_id, 2 app, 3 key, 4 add_out, 5 add_cost, 6..23 limits (3 x 6)
-- KEYS 4 (optional): the end user's month hash; ARGV 24 its monthly_tokens,
--       25 its monthly_cost (checked when the hold took the end user's scope)
-- Returns: {1, remaining_tokens}                   extended
--          {2, state}                              no open hold: nothing changed
--          {0, scope_index, limit_index, retry_ms}  refused, nothing changed
local M, R, H = KEYS[1], KEYS[2], KEYS[3]

local st = redis.call('HGET', H, 'st')
if st ~= 'H' then
  return {2, st or 'none'}
end
local scopes = scopes_of(ARGV[2], ARGV[3])
local add_out, add_cost = amount(4), amount(5)
local limit = limits_at(5)
local mon = read_month(M, scopes) or function() return 0 end
local now = now_ms()

local rem_tok = -1
for s = 1, 3 do
  local L = limit(s, 1)
  if L >= 0 then
    local left = L - mon(s, 1) - mon(s, 2)
    if left < add_out then return {0, s, 1, -1} end
    if rem_tok < 0 or left - add_out < rem_tok then rem_tok = left - add_out end
  end
end
for s = 1, 3 do
  local L = limit(s, 2)
  if L >= 0 and mon(s, 3) + mon(s, 4) + add_cost > L then
    return {0, s, 2, -1}
  end
end
local EUM = KEYS[4]
local eu = nil
if EUM and redis.call('HEXISTS', H, 'u') == 1 then
  eu = redis.call('HMGET', EUM, 'ut', 'ht', 'uc', 'hc')
  local L = amount(24, -1)
  if L >= 0 then
    local left = L - n(eu[1]) - n(eu[2])
    if left < add_out then return {0, 4, 1, -1} end
    if rem_tok < 0 or left - add_out < rem_tok then rem_tok = left - add_out end
  end
  L = amount(25, -1)
  if L >= 0 and n(eu[3]) + n(eu[4]) + add_cost > L then return {0, 4, 2, -1} end
end
-- The budgets the hold took: the same checks for what the extension adds.
local budgets = held_budgets(redis.call('HGET', H, 'b'))
for j, b in ipairs(budgets) do
  local f = b.f
  b.v = redis.call('HMGET', b.K, f .. ':ut', f .. ':ht', f .. ':uc', f .. ':hc')
  if b.lt >= 0 then
    local left = b.lt - n(b.v[1]) - n(b.v[2])
    if left < add_out then return {0, b.lvl, 8, -1, -1, -1, j, 1} end
    if rem_tok < 0 or left - add_out < rem_tok then rem_tok = left - add_out end
  end
  if b.lc >= 0 and n(b.v[3]) + n(b.v[4]) + add_cost > b.lc then return {0, b.lvl, 8, -1, -1, -1, j, 2} end
end
local buckets = {}
for s = 1, 3 do
  local L = limit(s, 6)
  if L >= 0 then
    local f = scopes[s] .. ':otpm'
    local v = redis.call('HMGET', R, f, f .. ':ts')
    local cur = refill(v[1], v[2], L, now)
    if cur < add_out then return {0, s, 6, refill_wait(cur, add_out, L)} end
    buckets[#buckets + 1] = {f, cur - add_out}
  end
end

local mw = {}
for s = 1, 3 do
  local p = scopes[s]
  mw[#mw + 1] = p .. ':ht'; mw[#mw + 1] = int(mon(s, 2) + add_out)
  mw[#mw + 1] = p .. ':hc'; mw[#mw + 1] = int(mon(s, 4) + add_cost)
end
redis.call('HSET', M, unpack(mw))
if eu then
  redis.call('HSET', EUM, 'ht', int(n(eu[2]) + add_out), 'hc', int(n(eu[4]) + add_cost))
end
for _, b in ipairs(budgets) do
  redis.call('HSET', b.K, b.f .. ':ht', int(n(b.v[2]) + add_out), b.f .. ':hc', int(n(b.v[4]) + add_cost))
end
for _, b in ipairs(buckets) do
  redis.call('HSET', R, b[1], string.format('%.6f', b[2]), b[1] .. ':ts', int(now))
end
local h = redis.call('HMGET', H, 'eo', 'ec')
redis.call('HSET', H, 'eo', int(n(h[1]) + add_out), 'ec', int(n(h[2]) + add_cost))
return {1, rem_tok}
