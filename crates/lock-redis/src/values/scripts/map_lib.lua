-- Shared by the map scripts. A TTL map is a hash (KEYS[1]) of field → value and a sorted set
-- (KEYS[2]) of field → the server time in ms at which it expires: Redis 7.0 has no per-field
-- expiry. A field whose deadline has passed is never returned; writes remove up to 100 of them.
local function now_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

local function is_live(field, now)
  local deadline = redis.call('ZSCORE', KEYS[2], field)
  return deadline and tonumber(deadline) > now
end

local function purge(now)
  local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 100)
  if #expired > 0 then
    redis.call('HDEL', KEYS[1], unpack(expired))
    redis.call('ZREM', KEYS[2], unpack(expired))
  end
end
