-- extend: add output to an open hold (a stream running past its slice).
-- The same all-or-nothing checks as hold, for what an extension consumes:
-- monthly tokens and cost, and the output-tokens-per-minute bucket.
-- KEYS: 1 month hash (of the hold's period), 2 rate/inflight hash, 3 hold record
-- ARGV: 1 request_id, 2 app, 3 key, 4 add_out, 5 add_cost, 6..23 limits (3 x 6)
-- Returns: {1, remaining_tokens}                   extended
--          {2, state}                              no open hold: nothing changed
--          {0, scope_index, limit_index, retry_ms}  refused, nothing changed
local M, R, H = KEYS[1], KEYS[2], KEYS[3]

local st = redis.call('HGET', H, 'st')
if st ~= 'H' then
  return {2, st or 'none'}
end
local scopes = {'t', 'a:' .. ARGV[2], 'k:' .. ARGV[3]}
local add_out, add_cost = tonumber(ARGV[4]), tonumber(ARGV[5])
local function limit(s, l) return tonumber(ARGV[5 + (s - 1) * 6 + l]) end
local function num(h, f) return tonumber(redis.call('HGET', h, f) or '0') end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local rem_tok = -1
for s = 1, 3 do
  local L = limit(s, 1)
  if L >= 0 then
    local left = L - num(M, scopes[s] .. ':ut') - num(M, scopes[s] .. ':ht')
    if left < add_out then return {0, s, 1, -1} end
    if rem_tok < 0 or left - add_out < rem_tok then rem_tok = left - add_out end
  end
end
for s = 1, 3 do
  local L = limit(s, 2)
  if L >= 0 and num(M, scopes[s] .. ':uc') + num(M, scopes[s] .. ':hc') + add_cost > L then
    return {0, s, 2, -1}
  end
end
local buckets = {}
for s = 1, 3 do
  local L = limit(s, 6)
  if L >= 0 then
    local f = scopes[s] .. ':otpm'
    local v = redis.call('HMGET', R, f, f .. ':ts')
    local cur, ts = tonumber(v[1]), tonumber(v[2])
    if cur == nil then cur = L; ts = now end
    local rate = L / 60000
    cur = math.min(L, cur + math.max(0, now - ts) * rate)
    if cur < add_out then
      local wait = 60000
      if add_out <= L and rate > 0 then wait = math.ceil((add_out - cur) / rate) end
      return {0, s, 6, wait}
    end
    buckets[#buckets + 1] = {f, cur - add_out}
  end
end

for s = 1, 3 do
  redis.call('HINCRBY', M, scopes[s] .. ':ht', add_out)
  redis.call('HINCRBY', M, scopes[s] .. ':hc', add_cost)
end
for _, b in ipairs(buckets) do
  redis.call('HSET', R, b[1], tostring(b[2]), b[1] .. ':ts', now)
end
redis.call('HINCRBY', H, 'eo', add_out)
redis.call('HINCRBY', H, 'ec', add_cost)
return {1, rem_tok}
