-- lease_settle: a batch of requests admitted from a lease, settled against
-- it in one call. Each request's real usage moves to `used`, the lease's
-- hold shrinks by as much (what the lease cannot cover is recorded as an
-- overrun, so used + held <= limit + overruns stays true), and each
-- request's usage event is parked in the outbox for the ledger writer, in
-- this same call: an event reaches the ledger exactly when its usage
-- reaches the counters. The batch can also give back part of the lease
-- (the replica shrinks it near a limit); with `close` the lease returns
-- everything it still holds (tokens, cost, slots) and ends.
-- Idempotent by batch: a batch whose seq is not above the lease's last is
-- a no-op (a retry after a lost reply).
-- A lease that is closed or unknown (expired by the reconciler, lost with
-- Redis) covers nothing: the batch is booked in full as overrun.
-- KEYS: 1 month hash (the lease's period), 2 rate/inflight hash,
--       3 lease record, 4 leases zset, 5 outbox hash
-- ARGV: 1 lease_id, 2 app, 3 key, 4 seq, 5 close (0/1),
--       6..11 give back (tokens, cost, slots, requests, input, output;
--       with close, tokens, cost and slots are all that is left),
--       12..29 limits (3 x 6, -1 = none), 30 item count,
--       then per item: request_id, tokens, cost, usage event JSON
-- Returns: {1, live, lt, lc, ls, ovr_tok, ovr_cost, i1, ot1, oc1, ...}
--            applied; per item with an overrun its index and amounts
--          {2, state}  this batch was applied before: nothing changed
local M, R, L, LZ, OUTBOX = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]

local h = redis.call('HMGET', L, 'st', 'seq', 'lt', 'lc', 'ls')
local seq = tonumber(ARGV[4])
if tonumber(h[2] or '0') >= seq then
  return {2, h[1] or 'none'}
end
local scopes = scopes_of(ARGV[2], ARGV[3])
local limit = limits_at(11)
local live = h[1] == 'L'
local lt, lc, ls = 0, 0, 0
if live then lt, lc, ls = n(h[3]), n(h[4]), n(h[5]) end

local count = amount(30)
local sum_tok, sum_cost, ovr_tok, ovr_cost = 0, 0, 0, 0
local ob, per = {}, {}
for i = 1, count do
  local b = 30 + (i - 1) * 4
  local tok, cost = amount(b + 2), amount(b + 3)
  local take_t, take_c = math.min(tok, lt), math.min(cost, lc)
  lt = lt - take_t; lc = lc - take_c
  sum_tok = sum_tok + tok; sum_cost = sum_cost + cost
  local ot, oc = tok - take_t, cost - take_c
  ovr_tok = ovr_tok + ot; ovr_cost = ovr_cost + oc
  if ot > 0 or oc > 0 then per[#per + 1] = i; per[#per + 1] = clamp(ot); per[#per + 1] = clamp(oc) end
  ob[#ob + 1] = ARGV[b + 1]; ob[#ob + 1] = ARGV[b + 4]
end

local close = ARGV[5] == '1'
local free_t, free_c, free_s = 0, 0, 0
if live then
  if close then
    free_t, free_c, free_s = lt, lc, ls
  else
    free_t = math.min(lt, amount(6)); free_c = math.min(lc, amount(7))
    free_s = math.min(ls, amount(8))
  end
  lt, lc, ls = lt - free_t, lc - free_c, ls - free_s
end

local MF = {':ut', ':ht', ':uc', ':hc', ':ot', ':oc'}
local mf = {}
for s = 1, 3 do
  for _, f in ipairs(MF) do mf[#mf + 1] = scopes[s] .. f end
end
local mv = redis.call('HMGET', M, unpack(mf))
local mw = {}
local function put(t, f, v) t[#t + 1] = f; t[#t + 1] = v end
local covered_t, covered_c = sum_tok - ovr_tok, sum_cost - ovr_cost
for s = 1, 3 do
  local p, b = scopes[s], (s - 1) * 6
  if count > 0 then
    put(mw, p .. ':ut', int(n(mv[b + 1]) + sum_tok))
    put(mw, p .. ':uc', int(n(mv[b + 3]) + sum_cost))
  end
  if covered_t + free_t > 0 then put(mw, p .. ':ht', int(math.max(0, n(mv[b + 2]) - covered_t - free_t))) end
  if covered_c + free_c > 0 then put(mw, p .. ':hc', int(math.max(0, n(mv[b + 4]) - covered_c - free_c))) end
  if ovr_tok > 0 then put(mw, p .. ':ot', int(n(mv[b + 5]) + ovr_tok)) end
  if ovr_cost > 0 then put(mw, p .. ':oc', int(n(mv[b + 6]) + ovr_cost)) end
end
if #mw > 0 then redis.call('HSET', M, unpack(mw)) end
if #ob > 0 then redis.call('HSET', OUTBOX, unpack(ob)) end

local give = {amount(9), amount(10), amount(11)}
if live and (free_s > 0 or give[1] > 0 or give[2] > 0 or give[3] > 0) then
  -- Slots back, and the rate capacity the lease did not use (a bucket
  -- never above its capacity).
  local rf = {}
  for s = 1, 3 do
    for _, f in ipairs({':if', ':rpm', ':itpm', ':otpm'}) do rf[#rf + 1] = scopes[s] .. f end
  end
  local rv = redis.call('HMGET', R, unpack(rf))
  local rw = {}
  for s = 1, 3 do
    local b = (s - 1) * 4
    if free_s > 0 then put(rw, scopes[s] .. ':if', int(math.max(0, n(rv[b + 1]) - free_s))) end
    for d = 1, 3 do
      local lim = limit(s, 3 + d)
      local cur = tonumber(rv[b + 1 + d])
      if lim >= 0 and cur and give[d] > 0 then
        put(rw, rf[b + 1 + d], string.format('%.6f', math.min(lim, cur + give[d])))
      end
    end
  end
  if #rw > 0 then redis.call('HSET', R, unpack(rw)) end
end

local now = now_ms()
local state = h[1] or 'X'
if close and live then state = 'C' end
redis.call('HSET', L, 'st', state, 'seq', int(seq), 'lt', int(lt), 'lc', int(lc), 'ls', int(ls), 'ts', now)
redis.call('EXPIRE', L, 172800)
if state == 'L' then redis.call('ZADD', LZ, now, ARGV[1]) else redis.call('ZREM', LZ, ARGV[1]) end
local reply = {1, live and not close and 1 or 0, lt, lc, ls, clamp(ovr_tok), clamp(ovr_cost)}
for _, v in ipairs(per) do reply[#reply + 1] = v end
return reply
