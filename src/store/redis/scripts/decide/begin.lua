-- The decision script, part 1 of 4 (assembled in order by scripts/mod.rs: begin, log,
-- subwindow, counters), one script still: sent whole, by one hash.
-- tollgate: one rate-limit decision, atomically, in one round trip.
--
-- The same arithmetic as the in-memory engines (src/algorithm/gcra.rs, window.rs). Lua
-- numbers are doubles, exact for integers below 2^53. GCRA works in integer nanoseconds
-- relative to now (exact for debts under 104 days), as the in-memory engine does: an
-- emission interval such as 3/2s (666,666,666 ns) is not a whole number of microseconds,
-- and a fraction added to an absolute time of ~1.7e15 us would be rounded to a quarter of
-- a microsecond. Absolute times are therefore kept as whole microseconds plus a remainder
-- in nanoseconds. Windows work in microseconds (periods are whole microseconds).
--
-- KEYS[1]  the bucket
-- ARGV[1]  now: "US" or "US:NS" (microseconds since the epoch, and nanoseconds more), or
--          "" to read the server's TIME
-- ARGV[2]  mode: "c" consume, "p" peek, "g" charge (take even past empty), "u" refund
--          (give cost back, never past full; then answer as a peek at no cost), "l" lease
--          (hybrid sync, GCRA: consume, then reserve a share of what is left; below)
-- ARGV[3]  cost
-- ARGV[4]  strict: "1" or "0" (GCRA only)
-- ARGV[5]  algorithm: "G" GCRA, "s" sliding window, "f" fixed window, "L" sliding log,
--          "r" sliding window in sub-windows (a rule's resolution)
-- ARGV[6]  number of quotas n, then n triples:
--          GCRA: interval (ns), tolerance (ns: burst x interval, or with on_limit = "delay"
--                what passes at once plus max_delay), burst
--          sub-windows ("r"): period (us), limit, resolution (us)
--          windows and the log: period (us), limit (count per period), 0 — or, for a
--                calendar quota (a fixed window per calendar day, week or month, whose
--                period is then nominal), "start:end" of now's calendar window (us),
--                computed by the caller, who has the time-zone rules
--
-- In mode "l", four more arguments follow the quotas: returned r, pending p, instances s
-- (0: lease nothing), cap c (the instance's share: rate x sync interval / instances).
-- First r tokens an instance leased and did not spend are given back and p tokens it
-- admitted while Redis was unreachable are charged (even past empty); then the request is
-- decided as in "c"; then, if admitted, min(left, c) tokens are leased — charged now for
-- the instance to spend locally — where left is what the tightest quota still holds. The
-- reply gains one number: the tokens leased. A fifth argument, "INSTANCE:SEQUENCE", marks
-- a settlement: its p is charged only if SEQUENCE is above the last one applied for that
-- instance on this bucket (kept 5 minutes in KEYS[1] .. "|" .. INSTANCE, the same slot),
-- so an instance that lost the reply can send the same settlement again safely.
--
-- State (a string, one key per bucket): algorithm, n, then per quota four numbers:
--   GCRA ("G"): interval (ns), TAT (whole us), TAT's remainder (ns), 0
--   windows: period (us), window start (us), previous, current
--   (an earlier build's GCRA, "g": interval (us), TAT (us), 0, 0 — still read)
-- A state measured by other quotas or another algorithm (a reload changed the rule, or
-- the client moved to another plan) is carried over: the units a client used stay used,
-- at most the new burst (or limit).
--
-- Reply: { allowed (1/0), reset (ns), then per quota three numbers }
--   GCRA: debt (ns), retry (ns), 0
--   windows: remaining, next (ns; -1 never), retry (ns; -1 never)
-- Durations are replied in nanoseconds, computed relative to now so that they stay exact
-- (a window's crossing time is a fraction of a microsecond, as in memory).
-- The key expires when the bucket would be full again; a full bucket is deleted.

-- One bucket's decision: KEYS and ARGV as above (parameters, so several buckets can be
-- decided in one call; see the end of the script).
local function decide(KEYS, ARGV)
-- now (whole microseconds) and now_ns (nanoseconds more, 0..999).
local now, now_ns
if ARGV[1] == "" then
  local t = redis.call("TIME")
  now, now_ns = tonumber(t[1]) * 1000000 + tonumber(t[2]), 0
else
  local us, ns = string.match(ARGV[1], "^(%d+):?(%d*)$")
  now, now_ns = tonumber(us), tonumber(ns) or 0
end
-- Nanoseconds from now until the absolute time (us, ns).
local function from_now(us, ns)
  return (us - now) * 1000 + (ns - now_ns)
end
local NEVER = -1
local mode, strict, alg = ARGV[2], ARGV[4] == "1", ARGV[5]
-- ARGV[3] is the cost, or "cost:mask" where the mask's i-th character is "1" for a quota
-- counting requests (a rule's requests): one per admission, nothing when settled.
local cost, mask = string.match(ARGV[3], "^(%d+):?([01]*)$")
cost = tonumber(cost) or 0
mask = mask or ""
-- What quota i takes: the cost, or for a quota counting requests one per admission and
-- nothing for a charge or refund (the current cost: a refund sets it to 0 once applied).
local function qc(i)
  if mask:sub(i, i) == "1" then
    if mode == "g" or mode == "u" then return 0 end
    return math.min(cost, 1)
  end
  return cost
end
-- One counted quota's figures (a window's, or a ring of sub-windows'): appends remaining,
-- next and retry (ns) to reply and returns the reset so far, the latest time until a quota
-- counts nothing (NEVER wins). used is its estimate in units of scale; until_at_most(o, n,
-- x) the nanoseconds until o (with x) counts at most n.
local function describe_counted(reply, reset, limit, used, scale, cost, allowed, until_at_most, o, x)
  local remaining = math.floor(math.max(limit * scale - used, 0) / scale)
  local next = 0
  if remaining < limit then next = until_at_most(o, limit - remaining - 1, x) end
  local retry = 0
  if not allowed then retry = until_at_most(o, limit - cost, x) end
  local full = until_at_most(o, 0, x)
  if full == NEVER then reset = NEVER elseif reset ~= NEVER then reset = math.max(reset, full) end
  reply[#reply + 1] = remaining
  reply[#reply + 1] = next
  reply[#reply + 1] = retry
  return reset
end
-- Keeps the state `parts` for `keep` microseconds (a millisecond at least), or, with
-- nothing to keep, deletes a stored one: a full bucket is a missing one.
local function keep_state(parts, keep, stored)
  if keep > 0 then
    redis.call("SET", KEYS[1], table.concat(parts, " "), "PX", math.max(math.ceil(keep / 1000), 1))
  elseif stored then
    redis.call("DEL", KEYS[1])
  end
end
-- The reply, headed by allowed (1/0) and the reset (ns).
local function headed(reply, allowed, reset)
  table.insert(reply, 1, reset)
  table.insert(reply, 1, allowed and 1 or 0)
  return reply
end
local n = tonumber(ARGV[6])
local q = {}
for i = 1, n do
  local base = 6 + (i - 1) * 3
  local third = ARGV[base + 3]
  local ws, we = string.match(third, "^(%d+):(%d+)$")
  q[i] = { a = tonumber(ARGV[base + 1]), b = tonumber(ARGV[base + 2]), c = tonumber(third) or 0,
           ws = tonumber(ws), we = tonumber(we) }
end
local consume = mode == "c" or mode == "l"
local lease = mode == "l" and alg == "G"
local extra = 6 + 3 * n

-- The stored state, if any. A sliding log's sorted set met by another algorithm (a reload
-- moved the rule off the log) starts afresh; a string met by the log is carried over below.
local old = nil
local stored = false
local key_type = nil
if alg == "L" then
  key_type = redis.call("TYPE", KEYS[1]).ok
  if key_type == "string" then stored = redis.call("GET", KEYS[1]) end
else
  stored = redis.pcall("GET", KEYS[1])
  if type(stored) == "table" and stored.err then
    redis.call("DEL", KEYS[1])
    stored = false
  end
end
if stored then
  local words = {}
  for w in string.gmatch(stored, "%S+") do
    words[#words + 1] = w
  end
  local m = tonumber(words[2]) or 0
  if words[1] == "r" then
    -- Sub-window rings: read as what each quota had used as of now ("u"), for carrying
    -- over to other numbers or another algorithm.
    old = { alg = "u", n = m, q = {} }
    local at = 3
    for i = 1, m do
      local p, r, newest = tonumber(words[at]), tonumber(words[at + 1]), tonumber(words[at + 2])
      -- A state no rule could have written (at most 60 sub-windows) is not read.
      if not (p and r and newest) or r <= 0 or p / r > 60 then
        old = nil
        break
      end
      local k = math.max(math.floor(p / r), 1)
      local j = math.max(math.floor(now / r), newest)
      local e = math.min(math.max(now - j * r, 0), r - 1)
      local full, oldest = 0, 0
      for idx = j - k, j do
        local c = 0
        if idx >= 0 and idx <= newest and newest - idx <= k then
          c = tonumber(words[at + 3 + idx % (k + 1)]) or 0
        end
        if idx == j - k then oldest = c else full = full + c end
      end
      old.q[i] = { tag = p, units = (oldest * (r - e) + full * r) / r }
      at = at + 4 + k
    end
  elseif #words == 2 + 4 * m then
    old = { alg = words[1], n = m, q = {} }
    for i = 1, m do
      local at = 2 + (i - 1) * 4
      old.q[i] = {
        tag = tonumber(words[at + 1]), x = tonumber(words[at + 2]),
        y = tonumber(words[at + 3]), z = tonumber(words[at + 4]),
      }
    end
  end
end

-- Units a stored quota has used as of now, whatever measured it.
local function used(o)
  if old.alg == "u" then
    return o.units
  elseif old.alg == "G" then
    return math.max(from_now(o.x, o.y), 0) / math.max(o.tag, 1)
  elseif old.alg == "g" then
    return math.max(o.x - now, 0) / math.max(o.tag, 1)
  end
  local p = math.max(o.tag, 1)
  local window = now - now % p
  if window == o.x then
    local weight = 0
    if old.alg == "s" then weight = (p - (now - window)) / p end
    return o.y * weight + o.z
  elseif old.alg == "s" and window == o.x + p then
    return o.z * (p - (now - window)) / p
  end
  return 0
end

