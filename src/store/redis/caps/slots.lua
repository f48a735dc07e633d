-- tollgate: a concurrency cap shared by gateways, atomically, in one round trip.
--
-- One sorted set per bucket (KEYS[1]): each member is a lease, one per request in flight,
-- scored by when it expires (milliseconds, the server's clock, so gateways need not agree
-- on the time). A gateway renews the leases of its requests still in flight; one that dies
-- stops renewing, and its slots come back once their leases expire.
--
-- ARGV[1]  mode: "a" acquire, "r" release, "n" renew
-- ARGV[2]  lease (ms)
-- ARGV[3]  limit (acquire; ignored otherwise)
-- ARGV[4…] lease ids (acquire: one; release and renew: any number)
--
-- Reply: acquire {1, in flight} when a slot was taken (this one included), else
-- {0, in flight}; release and renew {leases touched}.
local key, mode = KEYS[1], ARGV[1]
local lease = tonumber(ARGV[2])
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Expired leases are slots of requests whose gateway stopped renewing them.
redis.call("ZREMRANGEBYSCORE", key, "-inf", now)
if mode == "r" then
  local n = 0
  for i = 4, #ARGV do n = n + redis.call("ZREM", key, ARGV[i]) end
  return { n }
end
if mode == "n" then
  local n = 0
  for i = 4, #ARGV do n = n + redis.call("ZADD", key, "XX", "CH", now + lease, ARGV[i]) end
  if redis.call("EXISTS", key) == 1 then redis.call("PEXPIRE", key, lease) end
  return { n }
end
local busy = redis.call("ZCARD", key)
if busy >= tonumber(ARGV[3]) then return { 0, busy } end
redis.call("ZADD", key, now + lease, ARGV[4])
redis.call("PEXPIRE", key, lease)
return { 1, busy + 1 }
