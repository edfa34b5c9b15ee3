-- settle: move a hold to used at the real amount, free its in-flight slot,
-- and park the usage event in the outbox until the ledger has stored it.
-- KEYS: 1 month hash (of the hold's period, or now when the hold is lost),
--       2 rate/inflight hash, 3 hold record, 4 open-holds zset, 5 outbox hash
-- ARGV: 1 request_id, 2 app, 3 key, 4 act_in, 5 act_out, 6 act_cost,
--       7 usage event (JSON, stored verbatim), 8 status, 9..26 limits,
--       27 lost_ok: 1 when the caller has checked the ledger and the
--          request is not there (book a hold Redis lost), else 0
-- KEYS 6 (optional): the end user's month hash; booked when the hold took
--       the end user's scope (its record carries `u`), or, for a hold Redis
--       lost, when that month is known (carries `_rb`)
-- Returns: {1, overrun_tokens, overrun_cost}  settled now
--          {2, state}                          already settled/released: no-op
--          {3}                                 no hold record: nothing changed;
--                                              ask the ledger, then call
--                                              again with lost_ok (a replay
--                                              after the settled record
--                                              expired must not book twice)
-- Reads and writes are batched, as in hold.lua.
local M, R, H, OPEN, OUTBOX = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]

local h = redis.call('HMGET', H, 'st', 'ei', 'eo', 'ec', 'u', 'b')
if h[1] == 'S' or h[1] == 'R' then
  return {2, h[1]}
end
if not h[1] and ARGV[27] ~= '1' then
  return {3}
end
local scopes = scopes_of(ARGV[2], ARGV[3])
local act_in, act_out, act_cost = amount(4), amount(5), amount(6)
local limit = limits_at(8)
local act_tok = act_in + act_out
local held = h[1] == 'H'
local est_in, est_out, est_cost = 0, 0, 0
local ovr_tok, ovr_cost
if held then
  est_in, est_out, est_cost = n(h[2]), n(h[3]), n(h[4])
  ovr_tok = math.max(0, act_tok - est_in - est_out)
  ovr_cost = math.max(0, act_cost - est_cost)
else
  -- No hold record (Redis lost it): nothing was reserved for this usage in
  -- these counters, so all of it is recorded as overrun, keeping
  -- used + held <= limit + overruns true.
  ovr_tok, ovr_cost = act_tok, act_cost
end

local MF = {':ut', ':ht', ':uc', ':hc', ':ot', ':oc'}
local RF = {':if', ':itpm', ':otpm'}
local mf, rf = {}, {}
for s = 1, 3 do
  for _, f in ipairs(MF) do mf[#mf + 1] = scopes[s] .. f end
  for _, f in ipairs(RF) do rf[#rf + 1] = scopes[s] .. f end
end
local mv = redis.call('HMGET', M, unpack(mf))
local rv = held and redis.call('HMGET', R, unpack(rf)) or {}

local mw, rw = {}, {}
local function put(t, f, v) t[#t + 1] = f; t[#t + 1] = v end
for s = 1, 3 do
  local p, b = scopes[s], (s - 1) * 6
  put(mw, p .. ':ut', int(n(mv[b + 1]) + act_tok))
  put(mw, p .. ':uc', int(n(mv[b + 3]) + act_cost))
  if ovr_tok > 0 then put(mw, p .. ':ot', int(n(mv[b + 5]) + ovr_tok)) end
  if ovr_cost > 0 then put(mw, p .. ':oc', int(n(mv[b + 6]) + ovr_cost)) end
  if held then
    put(mw, p .. ':ht', int(math.max(0, n(mv[b + 2]) - est_in - est_out)))
    put(mw, p .. ':hc', int(math.max(0, n(mv[b + 4]) - est_cost)))
    local r = (s - 1) * 3
    put(rw, p .. ':if', int(math.max(0, n(rv[r + 1]) - 1)))
    -- Give the token buckets back what the estimate took beyond the real
    -- use (or take the excess when the estimate was low).
    local adj = {{5, 2, est_in - act_in}, {6, 3, est_out - act_out}}
    for _, d in ipairs(adj) do
      local L = limit(s, d[1])
      local cur = tonumber(rv[r + d[2]])
      if L >= 0 and cur and d[3] ~= 0 then
        put(rw, p .. RF[d[2]], string.format('%.6f', math.min(L, cur + d[3])))
      end
    end
  end
end
redis.call('HSET', M, unpack(mw))
if #rw > 0 then redis.call('HSET', R, unpack(rw)) end
local EUM = KEYS[6]
if EUM and held and h[5] then
  local e = redis.call('HMGET', EUM, 'ut', 'ht', 'uc', 'hc')
  redis.call('HSET', EUM, 'ut', int(n(e[1]) + act_tok), 'uc', int(n(e[3]) + act_cost),
    'ht', int(math.max(0, n(e[2]) - est_in - est_out)), 'hc', int(math.max(0, n(e[4]) - est_cost)))
elseif EUM and not held and redis.call('HEXISTS', EUM, '_rb') == 1 then
  local e = redis.call('HMGET', EUM, 'ut', 'uc')
  redis.call('HSET', EUM, 'ut', int(n(e[1]) + act_tok), 'uc', int(n(e[2]) + act_cost))
end
-- The budgets the hold took (its record's `b`): held to used. A hold
-- Redis lost took none that are known: its usage reaches them through the
-- ledger when they are rebuilt.
if held then
  for _, b in ipairs(held_budgets(h[6])) do
    local f = b.f
    local v = redis.call('HMGET', b.K, f .. ':ut', f .. ':ht', f .. ':uc', f .. ':hc', f .. ':uq', f .. ':hq')
    redis.call('HSET', b.K, f .. ':ut', int(n(v[1]) + act_tok),
      f .. ':ht', int(math.max(0, n(v[2]) - est_in - est_out)),
      f .. ':uc', int(n(v[3]) + act_cost), f .. ':hc', int(math.max(0, n(v[4]) - est_cost)),
      f .. ':uq', int(n(v[5]) + 1), f .. ':hq', int(math.max(0, n(v[6]) - 1)))
  end
end
redis.call('HSET', OUTBOX, ARGV[1], ARGV[7])
redis.call('HSET', H, 'st', 'S', 'ai', int(act_in), 'ao', int(act_out), 'ac', int(act_cost), 'x', ARGV[8])
redis.call('EXPIRE', H, 86400)
redis.call('ZREM', OPEN, ARGV[1])
return {1, clamp(ovr_tok), clamp(ovr_cost)}
