-- hold: all-or-nothing admission of one request across tenant, app and key.
-- KEYS: 1 month hash, 2 rate/inflight hash, 3 hold record, 4 open-holds zset
-- ARGV: 1 request_id, 2 app, 3 key, 4 est_in, 5 est_out, 6 est_cost,
--       7 model, 8 replica, 9 period, 10..27 limits (3 scopes x 6), -1 = none
--       limit order per scope: monthly_tokens, monthly_cost, max_inflight,
--       rpm, input_tpm, output_tpm
-- Returns: {1, remaining_requests, remaining_tokens}  admitted
--          {2, state}                                  duplicate (first answer)
--          {0, scope_index, limit_index, retry_ms[, headroom_tokens, headroom_cost]}
--                                                      refused, nothing changed
--          {-1}                                        month unknown: rebuild first
local M, R, H, OPEN = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

local st = redis.call('HGET', H, 'st')
if st then
  return {2, st}
end
if redis.call('HEXISTS', M, '_rb') == 0 then
  return {-1}
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local scopes = {'t', 'a:' .. ARGV[2], 'k:' .. ARGV[3]}
local est_in, est_out, est_cost = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local est_tok = est_in + est_out

local function limit(s, l) return tonumber(ARGV[9 + (s - 1) * 6 + l]) end

-- Phase 1: check everything, write nothing.
local function num(h, f) return tonumber(redis.call('HGET', h, f) or '0') end
-- Budget headroom of the tightest scope (-1: no budget of that kind); a
-- budget refusal returns it so the caller can offer a clamped request.
local rem_tok, fail_tok = -1, nil
for s = 1, 3 do
  local L = limit(s, 1)
  if L >= 0 then
    local left = L - num(M, scopes[s] .. ':ut') - num(M, scopes[s] .. ':ht')
    if left < est_tok and not fail_tok then fail_tok = s end
    if rem_tok < 0 or left < rem_tok then rem_tok = math.max(0, left) end
  end
end
local rem_cost, fail_cost = -1, nil
for s = 1, 3 do
  local L = limit(s, 2)
  if L >= 0 then
    local left = L - num(M, scopes[s] .. ':uc') - num(M, scopes[s] .. ':hc')
    if left < est_cost and not fail_cost then fail_cost = s end
    if rem_cost < 0 or left < rem_cost then rem_cost = math.max(0, left) end
  end
end
if fail_tok then return {0, fail_tok, 1, -1, rem_tok, rem_cost} end
if fail_cost then return {0, fail_cost, 2, -1, rem_tok, rem_cost} end
for s = 1, 3 do
  local L = limit(s, 3)
  if L >= 0 and num(R, scopes[s] .. ':if') + 1 > L then return {0, s, 3, 1000} end
end

-- Token buckets: capacity = the per-minute limit, refilled continuously.
local buckets = {}
local rem_req = -1
local dims = {{4, 'rpm', 1}, {5, 'itpm', est_in}, {6, 'otpm', est_out}}
for _, d in ipairs(dims) do
  for s = 1, 3 do
    local L = limit(s, d[1])
    if L >= 0 then
      local f = scopes[s] .. ':' .. d[2]
      local v = redis.call('HMGET', R, f, f .. ':ts')
      local cur, ts = tonumber(v[1]), tonumber(v[2])
      if cur == nil then cur = L; ts = now end
      local rate = L / 60000
      cur = math.min(L, cur + math.max(0, now - ts) * rate)
      local need = d[3]
      if cur < need then
        local wait = 60000
        if need <= L and rate > 0 then wait = math.ceil((need - cur) / rate) end
        return {0, s, d[1], wait}
      end
      buckets[#buckets + 1] = {f, cur - need}
      if d[1] == 4 and (rem_req < 0 or cur - need < rem_req) then rem_req = math.floor(cur - need) end
    end
  end
end

-- Phase 2: every check passed; take.
for s = 1, 3 do
  redis.call('HINCRBY', M, scopes[s] .. ':ht', est_tok)
  redis.call('HINCRBY', M, scopes[s] .. ':hc', est_cost)
  redis.call('HINCRBY', R, scopes[s] .. ':if', 1)
end
for _, b in ipairs(buckets) do
  redis.call('HSET', R, b[1], tostring(b[2]), b[1] .. ':ts', now)
end
redis.call('HSET', H, 'st', 'H', 'p', ARGV[9], 'a', ARGV[2], 'k', ARGV[3],
  'ei', est_in, 'eo', est_out, 'ec', est_cost, 'm', ARGV[7], 'r', ARGV[8], 'at', now)
redis.call('ZADD', OPEN, now, ARGV[1])
if rem_tok >= 0 then rem_tok = rem_tok - est_tok end
return {1, rem_req, rem_tok}
