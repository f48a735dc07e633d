-- The decision script, part 2 of 4 (assembled in order by scripts/mod.rs; begin.lua says
-- what it takes and replies): the sliding log.
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
  return headed(reply, allowed, reset)
end

