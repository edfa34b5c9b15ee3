-- login_attempt: the sign-in back-off of one subject (an email or a client
-- IP), shared by every replica. The rule is domain::login::Backoff: the first
-- `free` failures cost nothing, then each attempt waits base * 2^(extra)
-- ms after the last failure, at most `max`; an attempt refused while it
-- waits is not counted (an account is slowed, never locked); a run is
-- forgotten `forget` ms after its last failure.
-- KEYS: 1 the subject's hash {f = failures, l = last failure, ms}
-- ARGV: 1 mode ('try', 'ok' or 'refund'), 2 free, 3 base ms, 4 max ms, 5 forget ms
-- Returns: try: {1, failures counted} may go on (counted as a failure until
--          'ok' or 'refund'), {0, ms} wait that long; ok: {1, 0} the run is
--          cleared; refund: {1, failures} this attempt is not counted.
local K = KEYS[1]
if ARGV[1] == 'ok' then
  redis.call('DEL', K)
  return {1, 0}
end
if ARGV[1] == 'refund' then
  local f = tonumber(redis.call('HGET', K, 'f') or '0')
  if f > 0 then
    f = redis.call('HINCRBY', K, 'f', -1)
  end
  return {1, f}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local free, base, max, forget =
  tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local f = tonumber(redis.call('HGET', K, 'f') or '0')
local last = tonumber(redis.call('HGET', K, 'l') or '0')
if f > 0 and now - last >= forget then
  f = 0
end
if f >= free then
  -- Doubling with the cap checked at every step: no float overflow.
  local d = base
  local extra = f - free
  while extra > 0 and d < max do
    d = d * 2
    extra = extra - 1
  end
  if d > max then
    d = max
  end
  if now < last + d then
    return {0, last + d - now}
  end
end
f = f + 1
redis.call('HSET', K, 'f', f, 'l', now)
redis.call('PEXPIRE', K, forget)
return {1, f}
