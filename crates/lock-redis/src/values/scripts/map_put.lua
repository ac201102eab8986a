-- Put a field of a TTL map, an expiring hash (core/scripts/expiring_hash.lua).
--
-- KEYS[1]  the map's hash, e.g. lock:maps:{login-attempts}
-- KEYS[2]  its deadlines, e.g. lock:maps:{login-attempts}:deadlines
-- ARGV[1]  the field
-- ARGV[2]  the value (JSON)
-- ARGV[3]  the field's TTL in milliseconds
--
-- Returns 1.
local now = now_ms()
remove_expired(now)
put_entry(ARGV[1], ARGV[2], now + tonumber(ARGV[3]))
return 1
