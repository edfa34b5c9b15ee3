-- lease_acquire: take (or add to) a replica's lease on one scope chain
-- (tenant, app, key): ONE atomic hold of a chunk of monthly tokens and cost,
-- in-flight slots and RPM / input-TPM / output-TPM bucket capacity, with the
-- same all-or-nothing checks as hold.lua over the three scopes. Each
-- dimension gets what was asked, capped by a share of its headroom (a
-- quarter of a budget's, half of a bucket's or of the free slots); when a
-- share cannot cover the minimum (one request's need) the scope is near its
-- limit and the caller uses the per-request path instead.
-- KEYS: 1 month hash, 2 rate/inflight hash, 3 lease record, 4 leases zset
-- ARGV: 1 lease_id, 2 app, 3 key, 4 replica, 5 period,
--       6..11 want  (tokens, cost, slots, requests, input, output)
--       12..17 min  (same order)
--       18 budget share divisor, 19 rate share divisor,
--       20..37 limits (3 scopes x 6, -1 = none), order as in hold.lua
--       38 fresh: 1 when the replica has never been granted anything on
--          this lease (the record may be made), 0 for a top-up (it must be
--          live here already)
-- Returns: {1, g_tok, g_cost, g_slots, g_req, g_in, g_out, rem_req, rem_tok}
--          {2, state}                    the lease is closed, or unknown
--                                        ('none': Redis lost it): the
--                                        replica drops what it holds of it
--                                        and makes a new one
--          {3, scope_index, limit_index} near the limit: per-request path
--          {-1}                          month unknown: rebuild first
local M, R, L, LZ = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

local st = redis.call('HGET', L, 'st')
if st and st ~= 'L' then
  return {2, st}
end
-- A top-up of a lease Redis does not know: Redis lost it (a flush, a
-- failover) with the hold it was. Re-creating it here would leave the
-- replica its old local grant on top of the new one, admitting beyond the
-- budget for as long as the lease lives; so the replica is told instead.
if not st and ARGV[38] ~= '1' then
  return {2, 'none'}
end

local scopes = scopes_of(ARGV[2], ARGV[3])
local limit = limits_at(19)
local want, min = {}, {}
for i = 1, 6 do
  want[i] = amount(5 + i); min[i] = amount(11 + i)
end
local bdiv, rdiv = amount(18), amount(19)
-- The same rule as domain::lease::grant.
local function grant(w, headroom, div) return math.min(w, math.floor(math.max(0, headroom) / div)) end

local mon = read_month(M, scopes)
if not mon then
  return {-1}
end
local rate = read_rates(R, scopes)

-- Budgets: tokens (dimension 1, limit 1), cost (dimension 2, limit 2).
local g = {want[1], want[2], want[3], want[4], want[5], want[6]}
local rem_tok = -1
for d = 1, 2 do
  for s = 1, 3 do
    local lim = limit(s, d)
    if lim >= 0 then
      local h = lim - mon(s, 1 + (d - 1) * 2) - mon(s, 2 + (d - 1) * 2)
      g[d] = grant(g[d], h, bdiv)
      if g[d] < min[d] then return {3, s, d} end
      if d == 1 and (rem_tok < 0 or h < rem_tok) then rem_tok = math.max(0, h) end
    end
  end
end
-- In-flight slots (dimension 3, limit 3).
for s = 1, 3 do
  local lim = limit(s, 3)
  if lim >= 0 then
    g[3] = grant(g[3], lim - n(rate(s, 1)), rdiv)
    if g[3] < min[3] then return {3, s, 3} end
  end
end

local now = now_ms()

-- Buckets: requests (dim 4, limit 4), input (dim 5, limit 5), output (dim 6, limit 6).
local cur = {}
local rem_req = -1
for d = 4, 6 do
  local off = 2 + (d - 4) * 2 -- field offset in RF
  for s = 1, 3 do
    local lim = limit(s, d)
    if lim >= 0 then
      local c = refill(rate(s, off), rate(s, off + 1), lim, now)
      cur[#cur + 1] = {s, d, off, c}
      g[d] = grant(g[d], math.floor(c), rdiv)
      if g[d] < min[d] then return {3, s, d} end
    end
  end
end

-- Every check passed: take.
local mw, rw = {}, {}
for s = 1, 3 do
  local p = scopes[s]
  mw[#mw + 1] = p .. ':ht'; mw[#mw + 1] = int(mon(s, 2) + g[1])
  mw[#mw + 1] = p .. ':hc'; mw[#mw + 1] = int(mon(s, 4) + g[2])
  rw[#rw + 1] = p .. ':if'; rw[#rw + 1] = int(n(rate(s, 1)) + g[3])
end
for _, b in ipairs(cur) do
  local s, d, off, c = b[1], b[2], b[3], b[4]
  local left = c - g[d]
  rw[#rw + 1] = scopes[s] .. RATE_FIELDS[off]; rw[#rw + 1] = string.format('%.6f', left)
  rw[#rw + 1] = scopes[s] .. RATE_FIELDS[off] .. ':ts'; rw[#rw + 1] = int(now)
  if d == 4 and (rem_req < 0 or left < rem_req) then rem_req = math.floor(left) end
end
redis.call('HSET', M, unpack(mw))
redis.call('HSET', R, unpack(rw))
local lv = redis.call('HMGET', L, 'lt', 'lc', 'ls')
redis.call('HSET', L, 'st', 'L', 'p', ARGV[5], 'a', ARGV[2], 'k', ARGV[3], 'r', ARGV[4], 'ts', now,
  'lt', int(n(lv[1]) + g[1]), 'lc', int(n(lv[2]) + g[2]), 'ls', int(n(lv[3]) + g[3]))
redis.call('HSETNX', L, 'at', now)
redis.call('EXPIRE', L, 172800)
redis.call('ZADD', LZ, now, ARGV[1])
if rem_tok >= 0 then rem_tok = rem_tok - g[1] end
return {1, g[1], g[2], g[3], g[4], g[5], g[6], rem_req, clamp(rem_tok)}
