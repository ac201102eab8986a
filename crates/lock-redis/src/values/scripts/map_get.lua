-- Read a field of a TTL map (KEYS and grammar as in map_put.lua).
--
-- ARGV[1]  the field
--
-- Returns its value, or nil when absent or expired.
if is_live(ARGV[1], now_ms()) then
  return redis.call('HGET', KEYS[1], ARGV[1])
end
check_hash()
return false
