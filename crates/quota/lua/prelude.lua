-- prelude: shared by every script. The loader (engine.rs) puts it in front
-- of each script's own text, so each script is still one EVALSHA.
--
-- Numbers: Lua here counts in doubles, exact only up to 2^53, and
-- string.format('%d') of a double past 2^63 wraps. So no amount above
-- MAX ever reaches a script (the Rust side refuses it first, and `amount`
-- refuses it here too), and every counter is written through `int`, which
-- saturates at MAX: a sum of in-range amounts can pass 2^53, never wrap.
local MAX = 9007199254740991 -- 2^53 - 1

local function n(v) return tonumber(v) or 0 end

-- A value saturated to [-MAX, MAX] (for replies: Redis truncates a reply
-- number to a 64-bit integer, which wraps past 2^63 as '%d' does).
local function clamp(v)
  if v ~= v then return 0 end -- NaN
  if v > MAX then return MAX elseif v < -MAX then return -MAX end
  return v
end

-- A counter as Redis stores it: an integer in [-MAX, MAX].
local function int(v) return string.format('%d', clamp(v)) end

-- Argument i as an amount: an integer in [lo, MAX] (lo: 0, or -1 where
-- -1 means "no limit"), else the script stops with an error that names it
-- (the Rust side maps `TGRANGE` to QuotaError::OutOfRange).
local function amount(i, lo)
  local v = tonumber(ARGV[i])
  if v == nil or v ~= math.floor(v) or v < (lo or 0) or v > MAX then
    error({err = 'TGRANGE argument ' .. i .. ' out of range: ' .. tostring(ARGV[i])})
  end
  return v
end

-- Redis server time, ms since the epoch (never the caller's clock).
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The scopes of a request, outermost first: tenant, app, key.
local function scopes_of(app, key) return {'t', 'a:' .. app, 'k:' .. key} end

-- A scope's limits from ARGV: 6 per scope from `base` + 1 (monthly_tokens,
-- monthly_cost, max_inflight, rpm, input_tpm, output_tpm; -1 = none).
local function limits_at(base)
  return function(s, l) return amount(base + (s - 1) * 6 + l, -1) end
end

-- The month hash of three scopes: {_rb, then per scope ut, ht, uc, hc}.
-- nil when the month is unknown (Redis lost it: rebuild first).
local function read_month(M, scopes)
  local mf = {'_rb'}
  for s = 1, 3 do
    local p = scopes[s]
    mf[#mf + 1] = p .. ':ut'; mf[#mf + 1] = p .. ':ht'; mf[#mf + 1] = p .. ':uc'; mf[#mf + 1] = p .. ':hc'
  end
  local mv = redis.call('HMGET', M, unpack(mf))
  if not mv[1] then return nil end
  -- i: 1 used tokens, 2 held tokens, 3 used cost, 4 held cost
  return function(s, i) return n(mv[1 + (s - 1) * 4 + i]) end
end

-- The rates hash of three scopes: per scope in-flight, then value and
-- timestamp of the rpm, input-tpm and output-tpm buckets.
local RATE_FIELDS = {':if', ':rpm', ':rpm:ts', ':itpm', ':itpm:ts', ':otpm', ':otpm:ts'}
local function read_rates(R, scopes)
  local rf = {}
  for s = 1, 3 do
    for _, f in ipairs(RATE_FIELDS) do rf[#rf + 1] = scopes[s] .. f end
  end
  local rv = redis.call('HMGET', R, unpack(rf))
  return function(s, i) return rv[(s - 1) * 7 + i] end
end

-- A token bucket of capacity L (per minute), refilled continuously: its
-- level at `now` from its stored level and timestamp (full when unknown).
local function refill(cur, ts, L, now)
  cur, ts = tonumber(cur), tonumber(ts)
  if cur == nil then return L end
  return math.min(L, cur + math.max(0, now - (ts or now)) * L / 60000)
end
-- The wait until a bucket at `cur` can give `need`.
local function refill_wait(cur, need, L)
  if need <= L and L > 0 then return math.ceil((need - cur) * 60000 / L) end
  return 60000
end

-- Budgets of `Limits::budgets` (domain::budgets). A hold passes the ones
-- that count the request as its last arguments: ARGV[#ARGV] = B, before it
-- B x 6 (field prefix, level 1-3, tokens, cost, requests limits with -1 =
-- none, ttl seconds), and as its last B keys each one's period hash. Each
-- budget's counters are fields of that hash: <prefix>:ut/ht (tokens used,
-- held), :uc/hc (cost), :uq/hq (requests), :rb (rebuilt from the ledger).
local BUDGET_FIELDS = {':rb', ':ut', ':ht', ':uc', ':hc', ':uq', ':hq'}
local function read_budgets()
  local B = amount(#ARGV)
  local base, kbase = #ARGV - 6 * B - 1, #KEYS - B
  local out = {}
  for j = 1, B do
    local a = base + (j - 1) * 6
    local f, K = ARGV[a + 1], KEYS[kbase + j]
    local q = {}
    for i, x in ipairs(BUDGET_FIELDS) do q[i] = f .. x end
    local v = redis.call('HMGET', K, unpack(q))
    out[j] = {K = K, f = f, lvl = amount(a + 2), lt = amount(a + 3, -1), lc = amount(a + 4, -1),
      lr = amount(a + 5, -1), ttl = amount(a + 6), rb = v[1], ut = n(v[2]), ht = n(v[3]),
      uc = n(v[4]), hc = n(v[5]), uq = n(v[6]), hq = n(v[7])}
  end
  return out, B
end

-- The budgets a hold took, as its record keeps them (field `b`): one line
-- each, "<period hash>\t<prefix>\t<level>\t<tokens limit>\t<cost limit>".
-- Settle, release and extend find them there (same hash tag as the hold).
local function held_budgets(rec)
  local out = {}
  if not rec then return out end
  for line in string.gmatch(rec, '[^\n]+') do
    local K, f, lvl, lt, lc = string.match(line, '^(.-)\t(.-)\t(.-)\t(.-)\t(.-)$')
    if K then
      out[#out + 1] = {K = K, f = f, lvl = tonumber(lvl), lt = tonumber(lt), lc = tonumber(lc)}
    end
  end
  return out
end
