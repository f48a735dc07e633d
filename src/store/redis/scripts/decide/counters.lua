-- The decision script, part 4 of 4 (assembled in order by scripts/mod.rs; begin.lua says
-- what it takes and replies): GCRA and the windows, warm-up, leases, and several buckets in one call.
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
    reset = describe_counted(reply, reset, limit, scaled(c, e, p), p, qc(i), allowed,
      until_at_most, c, p)
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
  keep_state(parts, refills, stored)
end

headed(reply, allowed, reset)
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
