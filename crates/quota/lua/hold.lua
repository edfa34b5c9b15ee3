-- hold: all-or-nothing admission of one request across tenant, app and key.
-- KEYS: 1 month hash, 2 rate/inflight hash, 3 hold record, 4 open-holds zset
-- ARGV: 1 request_id, 2 app, 3 key, 4 est_in, 5 est_out, 6 est_cost,
--       7 model, 8 replica, 9 period, 10..27 limits (3 scopes x 6), -1 = none
--       limit order per scope: monthly_tokens, monthly_cost, max_inflight,
--       rpm, input_tpm, output_tpm
-- The end user's scope, only when the app limits its end users:
-- KEYS: 5 end user's month hash, 6 end user's rate hash, 7 the app's recent
--       end users (zset: digest -> last admission, Redis time)
-- ARGV: 28 end-user digest, 29 monthly_tokens, 30 monthly_cost, 31 rpm,
--       32 distinct end users per minute, 33 month ttl seconds
--          {-2}                                        end user's month unknown:
--                                                      rebuild it first
-- The budgets of Limits::budgets that count the request: the last
-- arguments and keys (`read_budgets` in the prelude); ARGV[#ARGV] = 0 when
-- none. A budget whose counters are unknown answers {-3, j}: rebuild that
-- budget's counters from the ledger first. A budget refusal:
--          {0, level, 8, -1, headroom_tokens, headroom_cost, j, kind (1
--          tokens, 2 cost, 3 requests)}
-- Returns: {1, remaining_requests, remaining_tokens}  admitted
--          {2, state}                                  duplicate (first answer)
--          {0, scope_index, limit_index, retry_ms[, headroom_tokens, headroom_cost]}
--                                                      refused, nothing changed
--          {-1}                                        month unknown: rebuild first
-- Reads and writes are batched (one HMGET and one HSET per hash): this script
-- runs on every request, and each redis.call costs Redis's single thread.
local M, R, H, OPEN = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

local st = redis.call('HGET', H, 'st')
if st then
  return {2, st}
end

local scopes = scopes_of(ARGV[2], ARGV[3])
local limit = limits_at(9)
local est_in, est_out, est_cost = amount(4), amount(5), amount(6)
local est_tok = est_in + est_out

local mon = read_month(M, scopes) -- i: 1 ut, 2 ht, 3 uc, 4 hc
if not mon then
  return {-1}
end
local rate = read_rates(R, scopes)
local budgets, NB = read_budgets()
for j, b in ipairs(budgets) do
  if not b.rb then return {-3, j} end
end

-- Phase 1: check everything, write nothing. Budgets first; a budget refusal
-- returns the tightest headroom so the caller can offer a clamped request.
local rem_tok, fail_tok = -1, nil
local rem_cost, fail_cost = -1, nil
for s = 1, 3 do
  local L = limit(s, 1)
  if L >= 0 then
    local left = L - mon(s, 1) - mon(s, 2)
    if left < est_tok and not fail_tok then fail_tok = s end
    if rem_tok < 0 or left < rem_tok then rem_tok = math.max(0, left) end
  end
  L = limit(s, 2)
  if L >= 0 then
    local left = L - mon(s, 3) - mon(s, 4)
    if left < est_cost and not fail_cost then fail_cost = s end
    if rem_cost < 0 or left < rem_cost then rem_cost = math.max(0, left) end
  end
end
if fail_tok then return {0, fail_tok, 1, -1, rem_tok, rem_cost} end
if fail_cost then return {0, fail_cost, 2, -1, rem_tok, rem_cost} end
for j, b in ipairs(budgets) do
  local lt, lc = -1, -1
  if b.lt >= 0 then lt = math.max(0, b.lt - b.ut - b.ht) end
  if b.lc >= 0 then lc = math.max(0, b.lc - b.uc - b.hc) end
  if b.lt >= 0 and lt < est_tok then return {0, b.lvl, 8, -1, lt, lc, j, 1} end
  if b.lc >= 0 and lc < est_cost then return {0, b.lvl, 8, -1, lt, lc, j, 2} end
  if b.lr >= 0 and b.uq + b.hq + 1 > b.lr then return {0, b.lvl, 8, -1, -1, -1, j, 3} end
  if lt >= 0 and (rem_tok < 0 or lt < rem_tok) then rem_tok = lt end
end
for s = 1, 3 do
  local L = limit(s, 3)
  if L >= 0 and n(rate(s, 1)) + 1 > L then return {0, s, 3, 1000} end
end

local now = now_ms()

-- Token buckets: capacity = the per-minute limit, refilled continuously.
local buckets = {}
local rem_req = -1
local dims = {{4, 2, 1}, {5, 4, est_in}, {6, 6, est_out}} -- limit index, field offset, need
for _, d in ipairs(dims) do
  for s = 1, 3 do
    local L = limit(s, d[1])
    if L >= 0 then
      local cur = refill(rate(s, d[2]), rate(s, d[2] + 1), L, now)
      local need = d[3]
      if cur < need then return {0, s, d[1], refill_wait(cur, need, L)} end
      buckets[#buckets + 1] = {scopes[s] .. RATE_FIELDS[d[2]], cur - need}
      if d[1] == 4 and (rem_req < 0 or cur - need < rem_req) then rem_req = math.floor(cur - need) end
    end
  end
end

-- The end user: budgets, rpm, and the app's cap on distinct end users in
-- the last minute (counted, not pruned: a refusal writes nothing).
local EUM, EUR, EUS = nil, nil, nil
if #KEYS - NB >= 7 then EUM, EUR, EUS = KEYS[5], KEYS[6], KEYS[7] end
local eu = nil
if EUM then
  local who = ARGV[28]
  local eL = function(i) return amount(28 + i, -1) end
  local since = now - 60000
  local last = tonumber(redis.call('ZSCORE', EUS, who) or '')
  if not last or last <= since then
    local cap = eL(4)
    if cap >= 0 and redis.call('ZCOUNT', EUS, '(' .. int(since), '+inf') >= cap then
      local first = redis.call('ZRANGEBYSCORE', EUS, '(' .. int(since), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
      local wait = 1000
      if first[2] then wait = math.max(1, tonumber(first[2]) - since) end
      return {0, 4, 7, wait}
    end
  end
  local m = redis.call('HMGET', EUM, 'ut', 'ht', 'uc', 'hc', '_rb')
  if not m[5] then return {-2} end
  local L = eL(1)
  if L >= 0 and L - n(m[1]) - n(m[2]) < est_tok then
    return {0, 4, 1, -1, math.max(0, L - n(m[1]) - n(m[2])), -1}
  end
  L = eL(2)
  if L >= 0 and L - n(m[3]) - n(m[4]) < est_cost then
    return {0, 4, 2, -1, -1, math.max(0, L - n(m[3]) - n(m[4]))}
  end
  L = eL(3)
  local left = nil
  if L >= 0 then
    local r = redis.call('HMGET', EUR, 'rpm', 'rpm:ts')
    local cur = refill(r[1], r[2], L, now)
    if cur < 1 then return {0, 4, 4, refill_wait(cur, 1, L)} end
    left = cur - 1
    if rem_req < 0 or left < rem_req then rem_req = math.floor(left) end
  end
  eu = {m = m, left = left, who = who}
end

-- Phase 2: every check passed; take.
local mw, rw = {}, {}
for s = 1, 3 do
  local p = scopes[s]
  mw[#mw + 1] = p .. ':ht'; mw[#mw + 1] = int(mon(s, 2) + est_tok)
  mw[#mw + 1] = p .. ':hc'; mw[#mw + 1] = int(mon(s, 4) + est_cost)
  rw[#rw + 1] = p .. ':if'; rw[#rw + 1] = int(n(rate(s, 1)) + 1)
end
for _, b in ipairs(buckets) do
  rw[#rw + 1] = b[1]; rw[#rw + 1] = string.format('%.6f', b[2])
  rw[#rw + 1] = b[1] .. ':ts'; rw[#rw + 1] = int(now)
end
redis.call('HSET', M, unpack(mw))
redis.call('HSET', R, unpack(rw))
redis.call('HSET', H, 'st', 'H', 'p', ARGV[9], 'a', ARGV[2], 'k', ARGV[3],
  'ei', int(est_in), 'eo', int(est_out), 'ec', int(est_cost), 'm', ARGV[7], 'r', ARGV[8], 'at', now)
redis.call('ZADD', OPEN, now, ARGV[1])
if NB > 0 then
  local rec = {}
  for _, b in ipairs(budgets) do
    redis.call('HSET', b.K, b.f .. ':ht', int(b.ht + est_tok), b.f .. ':hc', int(b.hc + est_cost),
      b.f .. ':hq', int(b.hq + 1))
    redis.call('EXPIRE', b.K, b.ttl)
    rec[#rec + 1] = b.K .. '\t' .. b.f .. '\t' .. int(b.lvl) .. '\t' .. int(b.lt) .. '\t' .. int(b.lc)
  end
  redis.call('HSET', H, 'b', table.concat(rec, '\n'))
end
if eu then
  redis.call('HSET', EUM, 'ht', int(n(eu.m[2]) + est_tok), 'hc', int(n(eu.m[4]) + est_cost))
  redis.call('EXPIRE', EUM, tonumber(ARGV[33]))
  if eu.left then
    redis.call('HSET', EUR, 'rpm', string.format('%.6f', eu.left), 'rpm:ts', int(now))
  end
  -- A full bucket is what a missing one reads as: idle end users vanish.
  redis.call('PEXPIRE', EUR, 120000)
  redis.call('ZADD', EUS, now, eu.who)
  redis.call('ZREMRANGEBYSCORE', EUS, '-inf', now - 60000)
  redis.call('PEXPIRE', EUS, 120000)
  redis.call('HSET', H, 'u', eu.who)
end
if rem_tok >= 0 then rem_tok = rem_tok - est_tok end
return {1, rem_req, rem_tok}
