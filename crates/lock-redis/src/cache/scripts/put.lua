-- Put an entry.
--
-- KEYS[1]  the cache's hash, e.g. lock:cache:{products}
-- KEYS[2]  its deadlines, e.g. lock:cache:{products}:deadlines
-- ARGV[1]  the channel, e.g. lock:cache:{products}:changed
-- ARGV[2]  the entry's key
-- ARGV[3]  the value (JSON)
-- ARGV[4]  the TTL in milliseconds
--
-- Both keys expire with the last entry. Returns the server time in ms.
local now = now_ms()
sweep(now)
local deadline = now + tonumber(ARGV[4])
redis.call('HSET', KEYS[1], ARGV[2], deadline .. ':' .. ARGV[3])
redis.call('ZADD', KEYS[2], deadline, ARGV[2])
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
redis.call('PEXPIREAT', KEYS[2], last[2])
redis.call('SPUBLISH', ARGV[1], 'k' .. ARGV[2])
return now
