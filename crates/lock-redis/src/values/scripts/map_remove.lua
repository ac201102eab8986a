-- Remove a field of a TTL map (KEYS and grammar as in map_put.lua).
--
-- ARGV[1]  the field
--
-- Returns 1 if it held a live value, else 0.
local was_live = is_live(ARGV[1], now_ms())
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if was_live then
  return 1
end
return 0
