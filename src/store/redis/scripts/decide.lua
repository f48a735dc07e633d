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

-- The sliding log ("L"): a sorted set of timestamps (scores in microseconds), not a
-- string. Quota triples: period (us), limit, 0. Entries inside (now - period, now] count;
-- only the newest max(limit) entries and none older than the longest period are kept.
-- Strict logs refused requests too. Reply as the windows': remaining, next, retry (ns).
-- A key holding another algorithm's state (a reload moved the rule to the log) is carried
-- over as memory does it: the most units any of its quotas has used are logged now.
if alg == "L" then
  local key = KEYS[1]
  -- Numbers as exact integers: Lua would print 1.7e15 with 14 significant digits.
  local function int(x) return string.format("%d", x) end
  local longest, capacity = 0, 0
  for i = 1, n do
    longest = math.max(longest, q[i].a)
    capacity = math.max(capacity, q[i].b)
  end
  if key_type ~= "zset" and key_type ~= "none" then
    local units = 0
    if old ~= nil then
      for j = 1, old.n do units = math.max(units, used(old.q[j])) end
    end
    redis.call("DEL", key)
    for k = 1, math.min(math.ceil(units), capacity) do
      redis.call("ZADD", key, int(now), int(now) .. ":c" .. k)
    end
  end
  redis.call("ZREMRANGEBYSCORE", key, "-inf", int(now - longest))
  if mode == "u" then
    -- A refund: the newest entries leave the log.
    if cost > 0 then redis.call("ZPOPMAX", key, cost) end
    cost = 0
  end
  local function inside(p)
    return redis.call("ZCOUNT", key, "(" .. int(now - p), "+inf")
  end
  local allowed = true
  for i = 1, n do
    if inside(q[i].a) + cost > q[i].b then allowed = false end
  end
  local take = ((mode == "c" or mode == "l") and allowed) or mode == "g"
  if take or (strict and not allowed and (mode == "c" or mode == "l")) then
    local at = now
    local newest = redis.call("ZRANGE", key, -1, -1, "WITHSCORES")
    if newest[2] then at = math.max(at, tonumber(newest[2])) end
    local k = redis.call("ZCARD", key)
    for _ = 1, math.min(cost, capacity) do
      while redis.call("ZSCORE", key, int(at) .. ":" .. k) do k = k + 1 end
      redis.call("ZADD", key, int(at), int(at) .. ":" .. k)
      k = k + 1
    end
    local excess = redis.call("ZCARD", key) - capacity
    if excess > 0 then redis.call("ZREMRANGEBYRANK", key, 0, excess - 1) end
  end
  -- Nanoseconds from now until the entry at score e (us) leaves a window of p.
  local function leaves(e, p)
    return math.max((e + p - now) * 1000 - now_ns, 0)
  end
  local reply, reset = {}, 0
  for i = 1, n do
    local p, limit = q[i].a, q[i].b
    local count = inside(p)
    local lower = "(" .. int(now - p)
    local next, retry = 0, 0
    if count > 0 then
      local oldest = redis.call("ZRANGEBYSCORE", key, lower, "+inf", "WITHSCORES", "LIMIT", 0, 1)
      next = leaves(tonumber(oldest[2]), p)
      local newest = redis.call("ZRANGE", key, -1, -1, "WITHSCORES")
      reset = math.max(reset, leaves(tonumber(newest[2]), p))
    end
    if not allowed then
      local k = count + cost - limit
      retry = NEVER
      if k >= 1 then
        local entry = redis.call("ZRANGEBYSCORE", key, lower, "+inf", "WITHSCORES", "LIMIT", k - 1, 1)
        if entry[2] then retry = leaves(tonumber(entry[2]), p) end
      end
    end
    reply[#reply + 1] = math.max(limit - count, 0)
    reply[#reply + 1] = next
    reply[#reply + 1] = retry
  end
  local newest = redis.call("ZRANGE", key, -1, -1, "WITHSCORES")
  if newest[2] then
    local ms = math.ceil(((tonumber(newest[2]) + longest - now) * 1000 - now_ns) / 1000000)
    redis.call("PEXPIRE", key, math.max(ms, 1))
  end
  table.insert(reply, 1, reset)
  table.insert(reply, 1, allowed and 1 or 0)
  return reply
end

-- The sliding window in sub-windows ("r"): quota triples period (us), limit, resolution
-- (us); k = period / resolution sub-windows, aligned to the epoch. State (a string):
-- "r", n, then per quota: period, resolution, the newest sub-window's index, and k + 1
-- counts (a ring). The estimate in sub-window j, e into it, is the oldest sub-window's
-- count weighted by (r - e)/r plus the k newer ones in full, compared times r in
-- integers, as src/algorithm/subwindow.rs does. A state of other numbers or another
-- algorithm is carried over: what it had used is counted in now's sub-window.
if alg == "r" then
  local words = {}
  if stored then
    for w in string.gmatch(stored, "%S+") do words[#words + 1] = w end
  end
  local rings = {}
  local fits = words[1] == "r" and tonumber(words[2]) == n
  local at = 3
  for i = 1, n do
    local p, r = q[i].a, q[i].c
    local k = math.max(math.floor(p / r), 1)
    rings[i] = { p = p, r = r, k = k, newest = 0, c = {}, at = at }
    for slot = 0, k do rings[i].c[slot] = 0 end
    if fits and (tonumber(words[at]) ~= p or tonumber(words[at + 1]) ~= r or #words < at + 3 + k) then
      fits = false
    end
    at = at + 4 + k
  end
  if fits and #words ~= at - 1 then fits = false end
  local function count(ring, idx)
    if idx < 0 or idx > ring.newest or ring.newest - idx > ring.k then return 0 end
    return ring.c[idx % (ring.k + 1)]
  end
  local function roll(ring, j)
    if j <= ring.newest and ring.newest ~= 0 then return ring.newest end
    local clear = ring.k + 1
    if ring.newest ~= 0 then clear = math.min(j - ring.newest, ring.k + 1) end
    for step = 0, clear - 1 do ring.c[(j - step) % (ring.k + 1)] = 0 end
    ring.newest = j
    return j
  end
  -- estimate x r in sub-window j, e into it.
  local function scaled(ring, j, e)
    local full = 0
    for idx = j - ring.k + 1, j do full = full + count(ring, idx) end
    return count(ring, j - ring.k) * (ring.r - e) + full * ring.r
  end
  -- Nanoseconds from now until the estimate is at most target (NEVER if never).
  local function until_at_most(ring, target, j)
    if target < 0 then return NEVER end
    for step = 0, ring.k + 1 do
      local at_j = j + step
      local oldest = count(ring, at_j - ring.k)
      local full = 0
      for idx = at_j - ring.k + 1, at_j do full = full + count(ring, idx) end
      if full <= target then
        -- In nanoseconds, relative to now: the crossing is a fraction of a microsecond.
        local R = ring.r * 1000
        local e = 0
        if oldest > 0 then e = R - math.min(math.floor((target - full) * R / oldest), R) end
        return math.max((at_j * ring.r - now) * 1000 - now_ns + e, 0)
      end
    end
    return NEVER
  end
  for i = 1, n do
    local ring = rings[i]
    if fits then
      ring.newest = tonumber(words[ring.at + 2])
      for slot = 0, ring.k do ring.c[slot] = tonumber(words[ring.at + 3 + slot]) end
    elseif old ~= nil then
      local o = old.q[math.min(i, old.n)]
      local units = o and used(o) or 0
      if units > 0 then
        local j = roll(ring, math.floor(now / ring.r))
        ring.c[j % (ring.k + 1)] = math.min(math.ceil(units), q[i].b)
      end
    end
  end
  if mode == "u" then
    -- A refund: from the newest sub-window backwards, never below zero.
    for i = 1, n do
      local ring = rings[i]
      local newest = roll(ring, math.floor(now / ring.r))
      local left = qc(i)
      for step = 0, ring.k do
        if left <= 0 or newest - step < 0 then break end
        local slot = (newest - step) % (ring.k + 1)
        local taken = math.min(left, ring.c[slot])
        ring.c[slot] = ring.c[slot] - taken
        left = left - taken
      end
    end
    cost = 0
  end
  local allowed = true
  local pos = {}
  for i = 1, n do
    local ring = rings[i]
    local j = math.floor(now / ring.r)
    local e = now - j * ring.r
    if j < ring.newest then j, e = ring.newest, ring.r - 1 end
    pos[i] = { j = j, e = e }
    if scaled(ring, j, e) + qc(i) * ring.r > q[i].b * ring.r then allowed = false end
  end
  local take = (consume and allowed) or mode == "g"
  local reply, reset = {}, 0
  for i = 1, n do
    local ring, j, e, limit = rings[i], pos[i].j, pos[i].e, q[i].b
    if mode ~= "p" then
      local counted = roll(ring, j)
      if take then
        local slot = counted % (ring.k + 1)
        ring.c[slot] = ring.c[slot] + qc(i)
      end
    end
    local remaining = math.floor(math.max(limit * ring.r - scaled(ring, j, e), 0) / ring.r)
    local next = 0
    if remaining < limit then next = until_at_most(ring, limit - remaining - 1, j) end
    local retry = 0
    if not allowed then retry = until_at_most(ring, limit - qc(i), j) end
    local full = until_at_most(ring, 0, j)
    if full == NEVER then reset = NEVER elseif reset ~= NEVER then reset = math.max(reset, full) end
    reply[#reply + 1] = remaining
    reply[#reply + 1] = next
    reply[#reply + 1] = retry
  end
  if mode ~= "p" then
    local parts = { "r", tostring(n) }
    local keep = 0
    for i = 1, n do
      local ring = rings[i]
      parts[#parts + 1] = string.format("%.17g %.17g %.17g", ring.p, ring.r, ring.newest)
      local any = false
      for slot = 0, ring.k do
        parts[#parts + 1] = string.format("%.17g", ring.c[slot])
        if ring.c[slot] > 0 then any = true end
      end
      if any then keep = math.max(keep, (ring.newest + 1) * ring.r + ring.p - now) end
    end
    if keep > 0 then
      redis.call("SET", KEYS[1], table.concat(parts, " "), "PX", math.max(math.ceil(keep / 1000), 1))
    elseif stored then
      redis.call("DEL", KEYS[1])
    end
  end
  table.insert(reply, 1, reset)
  table.insert(reply, 1, allowed and 1 or 0)
  return reply
end

-- This request's state: what is stored, carried over, or fresh. For GCRA, d is the debt:
-- nanoseconds from now until the quota is full again (0 or less: full).
local s = {}
local fits = old ~= nil and old.alg == alg and old.n == n
if fits then
  for i = 1, n do
    if old.q[i].tag ~= q[i].a then fits = false end
  end
end
for i = 1, n do
  s[i] = { x = 0, y = 0, z = 0, d = 0 }
end
if fits then
  for i = 1, n do
    local o = old.q[i]
    s[i] = { x = o.x, y = o.y, z = o.z, d = 0 }
    if alg == "G" then s[i].d = from_now(o.x, o.y) end
  end
elseif old ~= nil and alg == "G" and old.alg == "G" then
  -- Within GCRA: each quota inherits from the old quota of the closest interval.
  for i = 1, n do
    local best, best_distance = nil, nil
    for j = 1, old.n do
      local a, b = old.q[j].tag, q[i].a
      local small, large = math.min(a, b), math.max(a, b)
      local distance = math.floor(large * 1000000 / math.max(small, 1))
      if best_distance == nil or distance < best_distance then
        best, best_distance = old.q[j], distance
      end
    end
    if best ~= nil and best.tag > 0 then
      local debt = from_now(best.x, best.y)
      -- Capped at the new burst: a lowered limit starts empty, not in debt.
      if debt > 0 then s[i].d = math.min(math.floor(debt * q[i].a / best.tag), q[i].c * q[i].a) end
    end
  end
elseif old ~= nil then
  -- Across algorithms: quota i inherits from old quota i, or the last one.
  for i = 1, n do
    local o = old.q[math.min(i, old.n)]
    local units = o and used(o) or 0
    if units > 0 then
      if alg == "G" then
        s[i].d = math.floor(math.min(units, q[i].c) * q[i].a)
      else
        s[i].x = now - now % q[i].a
        s[i].z = math.ceil(math.min(units, q[i].b))
      end
    end
  end
end

local reply = {}
local allowed = true
local reset = 0
local leased = 0

if mode == "u" and alg == "G" then
  -- A refund: the debt shrinks by cost intervals, never below a full bucket.
  for i = 1, n do
    if s[i].d > 0 then s[i].d = math.max(s[i].d - qc(i) * q[i].a, 0) end
  end
  cost = 0
end

if lease then
  -- Leases given back, then what was admitted without Redis.
  local returned, pending = tonumber(ARGV[extra + 1]), tonumber(ARGV[extra + 2])
  local instance, sequence = string.match(ARGV[extra + 5] or "", "^(.+):(%d+)$")
  if pending > 0 and instance then
    local mark = KEYS[1] .. "|" .. instance
    if tonumber(sequence) <= (tonumber(redis.call("GET", mark)) or 0) then
      pending = 0
    else
      redis.call("SET", mark, sequence, "PX", 300000)
    end
  end
  for i = 1, n do
    s[i].d = math.max(math.max(s[i].d, 0) - returned * q[i].a, 0) + pending * q[i].a
  end
end

-- Warm-up (GCRA, one quota, not leasing): ARGV[extra + 1] is the warm-up period (ns).
-- Guava's SmoothWarmingUp as in src/algorithm/warmup.rs, in the same floating-point
-- operations: the quota's fourth stored number is its stored permits at the TAT (0, warm,
-- for a state written without warm-up; a fresh bucket is cold). The reply's third figure
-- is the debt the delay is measured from (before + cost x interval): a request's own warm
-- cost is paid by the next one.
local ramp = nil
if alg == "G" and not lease and n == 1 and (tonumber(ARGV[extra + 1]) or 0) > 0 then
  local period, stable = tonumber(ARGV[extra + 1]), q[1].a
  local cold = stable * 3
  local threshold = 0.5 * period / stable
  local max = threshold + 2 * period / (stable + cold)
  ramp = { stable = stable, threshold = threshold, max = max,
    slope = (cold - stable) / (max - threshold), cool = period / max }
  if old == nil then s[1].z = max end
end
local function interval_at(stored)
  return ramp.stable + math.max(stored - ramp.threshold, 0) * ramp.slope
end
local function cost_of_stored(stored, take)
  local above = math.max(stored - ramp.threshold, 0)
  local from_above = math.min(above, take)
  local sloped = from_above * (interval_at(stored) + interval_at(stored - from_above)) / 2
  return sloped + ramp.stable * (take - from_above)
end
local function until_cold(stored)
  return math.ceil(math.max(ramp.max - stored, 0) * ramp.cool)
end

if alg == "G" then
  -- Stored permits now: accrued while the TAT was in the past.
  local stored_now = 0
  if ramp then stored_now = math.min(s[1].z + math.max(-s[1].d, 0) / ramp.cool, ramp.max) end
  local function refuses(i)
    return math.max(s[i].d, 0) + qc(i) * q[i].a > q[i].b
  end
  for i = 1, n do
    if refuses(i) then allowed = false end
  end
  if not allowed and strict and consume and cost > 0 then
    for i = 1, n do
      if refuses(i) then
        s[i].d = math.max(s[i].d, q[i].a + q[i].b - qc(i) * q[i].a)
      end
    end
    if ramp then s[1].z = stored_now end
  end
  local take = (consume and allowed) or mode == "g"
  for i = 1, n do
    local start = math.max(s[i].d, 0)
    local taken = start + qc(i) * q[i].a
    local debt = start
    local basis = 0
    if take then
      if ramp then
        local spent = math.min(stored_now, cost)
        local warm = cost_of_stored(stored_now, spent) + (cost - spent) * ramp.stable
        s[i].z = stored_now - spent
        basis = taken
        debt = start + math.max(math.ceil(warm), cost * q[i].a)
      else
        debt = taken
      end
      s[i].d = debt
    end
    reset = math.max(reset, debt)
    local retry = 0
    if not allowed then retry = math.max(math.max(s[i].d, 0) + qc(i) * q[i].a - q[i].b, 0) end
    reply[#reply + 1] = debt
    reply[#reply + 1] = retry
    reply[#reply + 1] = basis
  end
  -- A lease: what the tightest quota has left, up to the instance's share (cap), charged
  -- now.
  local shares, cap = tonumber(ARGV[extra + 3]) or 0, tonumber(ARGV[extra + 4]) or 0
  if lease and allowed and shares > 0 and cap > 0 then
    local left = nil
    for i = 1, n do
      local room = math.floor((q[i].b - math.max(s[i].d, 0)) / q[i].a)
      if left == nil or room < left then left = room end
    end
    leased = math.min(math.max(left or 0, 0), cap)
    for i = 1, n do
      s[i].d = math.max(s[i].d, 0) + leased * q[i].a
    end
  end
else
  local fixed = alg == "f"
  local refund = mode == "u" and cost or 0
  if mode == "u" then cost = 0 end
  -- Now's window of quota i: its start and length (a calendar window as the caller gave
  -- it, else a period from the epoch).
  local function span(i)
    if q[i].ws then return q[i].ws, q[i].we - q[i].ws end
    return now - now % q[i].a, q[i].a
  end
  -- The counter rolled forward into now's window, and the elapsed time into it. Calendar
  -- windows differ in length: a later one is simply a new one.
  local function roll(c, i)
    local window, p = span(i)
    if q[i].ws and window > c.x then
      return { x = window, y = 0, z = 0 }, math.max(now - window, 0)
    end
    if c.x == 0 or window >= c.x + 2 * p then
      return { x = window, y = 0, z = 0 }, now - window
    end
    if window == c.x + p then
      return { x = window, y = c.z, z = 0 }, now - window
    end
    return { x = c.x, y = c.y, z = c.z }, math.min(math.max(now - c.x, 0), p - 1)
  end
  local function scaled(c, e, p)
    if fixed then return c.z * p end
    return c.y * (p - e) + c.z * p
  end
  -- Nanoseconds from now until the estimate is at most target units (NEVER if never).
  local function until_at_most(c, target, p)
    if target < 0 then return NEVER end
    local P = p * 1000
    local start = (c.x - now) * 1000
    if c.z <= target then
      if fixed or c.y == 0 then return 0 end
      local room = math.floor((target - c.z) * P / c.y)
      return math.max(start + P - math.min(room, P), 0)
    end
    if fixed then return math.max(start + P, 0) end
    return math.max(start + 2 * P - math.min(math.floor(target * P / c.z), P), 0)
  end
  if refund > 0 then
    -- A refund: from the current window's count, then the previous one's.
    for i = 1, n do
      local c = roll(s[i], i)
      local back = refund
      if mask:sub(i, i) == "1" then back = 0 end
      local from_current = math.min(back, c.z)
      c.z = c.z - from_current
      c.y = math.max(c.y - (back - from_current), 0)
      s[i] = c
    end
  end
  for i = 1, n do
    local c, e = roll(s[i], i)
    local _, p = span(i)
    if scaled(c, e, p) + qc(i) * p > q[i].b * p then allowed = false end
  end
  local take = (consume and allowed) or mode == "g"
  for i = 1, n do
    local _, p = span(i)
    local limit = q[i].b
    local c, e = roll(s[i], i)
    if take then c.z = c.z + qc(i) end
    if mode ~= "p" then s[i] = c end
    local remaining = math.floor(math.max(limit * p - scaled(c, e, p), 0) / p)
    local next = 0
    if remaining < limit then next = until_at_most(c, limit - remaining - 1, p) end
    local retry = 0
    if not allowed then retry = until_at_most(c, limit - qc(i), p) end
    local full = until_at_most(c, 0, p)
    if full == NEVER then reset = NEVER elseif reset ~= NEVER then reset = math.max(reset, full) end
    reply[#reply + 1] = remaining
    reply[#reply + 1] = next
    reply[#reply + 1] = retry
  end
end

-- Keep the state until the bucket would be full again; a full bucket is a missing one.
if mode ~= "p" then
  local refills = 0
  local parts = { alg, tostring(n) }
  for i = 1, n do
    local p = q[i].a
    local left = 0
    if alg == "G" then
      -- Back to an absolute time: whole microseconds and the nanoseconds more.
      local total = now_ns + math.max(s[i].d, 0)
      local whole = math.floor(total / 1000)
      local permits = 0
      if ramp then permits = s[i].z end
      s[i].x, s[i].y, s[i].z = now + whole, total - whole * 1000, permits
      left = math.ceil(s[i].d / 1000)
      -- A warming bucket is as good as new only once it is fully cold again.
      if ramp then left = math.ceil((math.max(s[i].d, 0) + until_cold(permits)) / 1000) end
    elseif alg == "s" then
      if s[i].y > 0 or s[i].z > 0 then left = s[i].x + 2 * p - now end
    elseif s[i].z > 0 then
      left = s[i].x + p - now
      if q[i].we then left = q[i].we - now end
    end
    refills = math.max(refills, left)
    parts[#parts + 1] = string.format("%.17g %.17g %.17g %.17g", p, s[i].x, s[i].y, s[i].z)
  end
  if refills > 0 then
    redis.call("SET", KEYS[1], table.concat(parts, " "), "PX", math.max(math.ceil(refills / 1000), 1))
  elseif stored then
    redis.call("DEL", KEYS[1])
  end
end

table.insert(reply, 1, reset)
table.insert(reply, 1, allowed and 1 or 0)
if mode == "l" then reply[#reply + 1] = leased end
return reply
end

-- Several buckets at once (a request's rule and the `also` limits it meets, on one
-- server): ARGV[1] is "*", ARGV[2] the number of buckets m, then for each bucket the count
-- of its arguments followed by those arguments, as above, for KEYS[i]. When any bucket
-- consumes ("c"), every bucket is first decided as a peek ("p", at its cost); only if all
-- would admit is each decided in its own mode, else the peeks are the answer: all take
-- their tokens or none does. Reply: each bucket's reply, in order.
if ARGV[1] == "*" then
  local m = tonumber(ARGV[2])
  local sets, at = {}, 3
  for i = 1, m do
    local count = tonumber(ARGV[at])
    local args = {}
    for j = 1, count do args[j] = ARGV[at + j] end
    sets[i] = args
    at = at + count + 1
  end
  local consuming = false
  for i = 1, m do
    if sets[i][2] == "c" then consuming = true end
  end
  if consuming then
    local peeks, all = {}, true
    for i = 1, m do
      local look = {}
      for j = 1, #sets[i] do look[j] = sets[i][j] end
      look[2] = "p"
      peeks[i] = decide({ KEYS[i] }, look)
      if peeks[i][1] ~= 1 then all = false end
    end
    if not all then
      -- Refused, so nothing is taken; but a strict bucket that refused keeps refusing
      -- while the attempts go on (its refusal holds the refill back, as alone).
      for i = 1, m do
        if peeks[i][1] ~= 1 and sets[i][2] == "c" and sets[i][4] == "1" then
          peeks[i] = decide({ KEYS[i] }, sets[i])
        end
      end
      return peeks
    end
  end
  local replies = {}
  for i = 1, m do replies[i] = decide({ KEYS[i] }, sets[i]) end
  return replies
end
return decide(KEYS, ARGV)
