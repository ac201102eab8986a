-- Put a field of a TTL map.
--
-- KEYS[1]  the map's hash, e.g. lock:maps:{login-attempts}
-- KEYS[2]  its deadlines, e.g. lock:maps:{login-attempts}:deadlines
-- ARGV[1]  the field
-- ARGV[2]  the value (JSON)
-- ARGV[3]  the field's TTL in milliseconds
--
-- Both keys expire with the map's last field. Returns 1.
local now = now_ms()
purge(now)
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), ARGV[1])
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
redis.call('PEXPIREAT', KEYS[2], last[2])
return 1
