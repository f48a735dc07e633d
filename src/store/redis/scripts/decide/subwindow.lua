-- The decision script, part 3 of 4 (assembled in order by scripts/mod.rs; begin.lua says
-- what it takes and replies): the sliding window in sub-windows.
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
    reset = describe_counted(reply, reset, limit, scaled(ring, j, e), ring.r, qc(i), allowed,
      until_at_most, ring, j)
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
    keep_state(parts, keep, stored)
  end
  return headed(reply, allowed, reset)
end

