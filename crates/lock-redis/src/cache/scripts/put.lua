-- Put an entry. A named cache is an expiring hash (core/scripts/expiring_hash.lua) of key →
-- "<deadline>:<JSON>": readers compare the deadline in the value, with no script. Changes are
-- published on the cache's channel: "k<key>" for an entry, "c" for a clear.
--
-- KEYS[1]  the cache's hash, e.g. lock:cache:{products}
-- KEYS[2]  its deadlines, e.g. lock:cache:{products}:deadlines
-- ARGV[1]  the channel, e.g. lock:cache:{products}:changed
-- ARGV[2]  the entry's key
-- ARGV[3]  the value (JSON)
-- ARGV[4]  the TTL in milliseconds
--
-- Returns the server time in ms.
local now = now_ms()
remove_expired(now)
local deadline = now + tonumber(ARGV[4])
put_entry(ARGV[2], deadline .. ':' .. ARGV[3], deadline)
redis.call('SPUBLISH', ARGV[1], 'k' .. ARGV[2])
return now
