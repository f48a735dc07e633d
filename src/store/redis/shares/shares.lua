-- tollgate: budgets divided among instances by demand, atomically, in one round trip.
--
-- One hash per budget (KEYS[k]): a field per instance, its claim "rate burst demand
-- expires" (rate and demand in millionths a second, expires in ms of the server's clock,
-- so instances need not agree on the time). A claim is what the instance may have handed
-- out; the claims never sum to more than the budget. Each call, for each budget: expired
-- claims are dropped (an instance that died stops renewing), this instance's part is
-- computed — a floor split evenly among the instances, the rest by demand — and limited
-- to the room the others' claims leave; kept as it was when it moved by less than the
-- hysteresis and still fits; then the claim written is the larger of that part and what
-- the instance still holds out (`held`: shares handed out that it cannot take back yet).
--
-- ARGV[1]  this instance's id
-- ARGV[2]  claim lifetime (ms)
-- ARGV[3]  floor, per mille of the budget, split evenly among the instances
-- ARGV[4]  hysteresis, per mille of the budget
-- then per budget, 7 values (integers):
--   rate (millionths a second), burst, demand (millionths a second),
--   held rate, held burst, current part's rate, current part's burst
--
-- Reply: per budget, {part's rate, part's burst, instances claiming it}, flattened.
local me = ARGV[1]
local life = tonumber(ARGV[2])
local floor_share = tonumber(ARGV[3]) / 1000
local hysteresis = tonumber(ARGV[4]) / 1000
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local reply = {}
for k = 1, #KEYS do
  local key = KEYS[k]
  local at = 4 + (k - 1) * 7
  local rate, burst, demand = tonumber(ARGV[at + 1]), tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
  local held_rate, held_burst = tonumber(ARGV[at + 4]), tonumber(ARGV[at + 5])
  local current_rate, current_burst = tonumber(ARGV[at + 6]), tonumber(ARGV[at + 7])
  local others_rate, others_burst, others_demand, instances = 0, 0, 0, 1
  local fields = redis.call("HGETALL", key)
  for i = 1, #fields, 2 do
    if fields[i] ~= me then
      local r, b, d, e = string.match(fields[i + 1], "^(%d+) (%d+) (%d+) (%d+)$")
      if r == nil or tonumber(e) <= now then
        redis.call("HDEL", key, fields[i])
      else
        others_rate = others_rate + tonumber(r)
        others_burst = others_burst + tonumber(b)
        others_demand = others_demand + tonumber(d)
        instances = instances + 1
      end
    end
  end
  local total = demand + others_demand
  local weight = 1 / instances
  if total > 0 then
    weight = floor_share / instances + (1 - floor_share) * demand / total
  end
  local room_rate = math.max(0, rate - others_rate)
  local room_burst = math.max(0, burst - others_burst)
  -- (A hair added before rounding down, lest 0.1 + 0.9 come to 0.999…: the room bounds it.)
  local part_rate = math.min(math.floor(rate * weight + 1e-6), room_rate)
  local part_burst = math.min(math.floor(burst * weight + 1e-6), room_burst)
  -- Every change refills the Envoys' buckets: a part that barely moved stays, if it fits.
  -- (A first part, from nothing, is always taken.)
  if current_rate > 0 and current_rate <= room_rate
    and math.abs(part_rate - current_rate) <= hysteresis * rate then
    part_rate = current_rate
  end
  if current_burst > 0 and current_burst <= room_burst
    and math.abs(part_burst - current_burst) <= math.max(1, hysteresis * burst) then
    part_burst = current_burst
  end
  local claim_rate = math.max(part_rate, held_rate)
  local claim_burst = math.max(part_burst, held_burst)
  redis.call("HSET", key, me,
    string.format("%d %d %d %d", claim_rate, claim_burst, demand, now + life))
  redis.call("PEXPIRE", key, life)
  reply[#reply + 1] = part_rate
  reply[#reply + 1] = part_burst
  reply[#reply + 1] = instances
end
return reply
