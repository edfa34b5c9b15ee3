-- settle: move a hold to used at the real amount, free its in-flight slot,
-- and park the usage event in the outbox until the ledger has stored it.
-- KEYS: 1 month hash (of the hold's period, or now when the hold is lost),
--       2 rate/inflight hash, 3 hold record, 4 open-holds zset, 5 outbox hash
-- ARGV: 1 request_id, 2 app, 3 key, 4 act_in, 5 act_out, 6 act_cost,
--       7 usage event (JSON, stored verbatim), 8 status, 9..26 limits
-- Returns: {1, overrun_tokens, overrun_cost}  settled now
--          {2, state}                          already settled/released: no-op
local M, R, H, OPEN, OUTBOX = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]

local h = redis.call('HMGET', H, 'st', 'ei', 'eo', 'ec')
if h[1] == 'S' or h[1] == 'R' then
  return {2, h[1]}
end
local scopes = {'t', 'a:' .. ARGV[2], 'k:' .. ARGV[3]}
local act_in, act_out, act_cost = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local act_tok = act_in + act_out
local ovr_tok, ovr_cost = 0, 0
local held = h[1] == 'H'
local est_in, est_out, est_cost = 0, 0, 0
if held then
  est_in, est_out, est_cost = tonumber(h[2]), tonumber(h[3]), tonumber(h[4])
  ovr_tok = math.max(0, act_tok - est_in - est_out)
  ovr_cost = math.max(0, act_cost - est_cost)
else
  -- No hold record (Redis lost it): nothing was reserved for this usage in
  -- these counters, so all of it is recorded as overrun, keeping
  -- used + held <= limit + overruns true.
  ovr_tok, ovr_cost = act_tok, act_cost
end

for s = 1, 3 do
  local p = scopes[s]
  if held then
    if redis.call('HINCRBY', M, p .. ':ht', -(est_in + est_out)) < 0 then redis.call('HSET', M, p .. ':ht', 0) end
    if redis.call('HINCRBY', M, p .. ':hc', -est_cost) < 0 then redis.call('HSET', M, p .. ':hc', 0) end
    if redis.call('HINCRBY', R, p .. ':if', -1) < 0 then redis.call('HSET', R, p .. ':if', 0) end
  end
  redis.call('HINCRBY', M, p .. ':ut', act_tok)
  redis.call('HINCRBY', M, p .. ':uc', act_cost)
  if ovr_tok > 0 then redis.call('HINCRBY', M, p .. ':ot', ovr_tok) end
  if ovr_cost > 0 then redis.call('HINCRBY', M, p .. ':oc', ovr_cost) end
end

-- Give the token buckets back what the estimate took beyond the real use
-- (or take the excess when the estimate was low).
if held then
  local dims = {{5, 'itpm', est_in - act_in}, {6, 'otpm', est_out - act_out}}
  for _, d in ipairs(dims) do
    for s = 1, 3 do
      local L = tonumber(ARGV[8 + (s - 1) * 6 + d[1]])
      local f = scopes[s] .. ':' .. d[2]
      if L >= 0 and d[3] ~= 0 then
        local cur = tonumber(redis.call('HGET', R, f) or '')
        if cur then redis.call('HSET', R, f, tostring(math.min(L, cur + d[3]))) end
      end
    end
  end
end

redis.call('HSET', OUTBOX, ARGV[1], ARGV[7])
redis.call('HSET', H, 'st', 'S', 'ai', act_in, 'ao', act_out, 'ac', act_cost, 'x', ARGV[8])
redis.call('EXPIRE', H, 86400)
redis.call('ZREM', OPEN, ARGV[1])
return {1, ovr_tok, ovr_cost}
