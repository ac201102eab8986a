-- Shared by the cache scripts. A named cache is a hash (KEYS[1]) of key → "<deadline>:<JSON>"
-- and a sorted set (KEYS[2]) of key → deadline, the server time in ms at which the entry
-- expires: Redis 7.0 has no per-field expiry. Readers compare the deadline in the value; the
-- sorted set lets writers remove up to 100 expired entries per call. Changes are published on
-- ARGV[1], the cache's channel: "k<key>" for an entry, "c" for a clear.
local function now_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

local function sweep(now)
  local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 100)
  if #expired > 0 then
    redis.call('HDEL', KEYS[1], unpack(expired))
    redis.call('ZREM', KEYS[2], unpack(expired))
  end
end
