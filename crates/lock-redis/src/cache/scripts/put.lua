-- Put an entry. A named cache is an expiring hash (core/scripts/expiring_hash.lua) of key →
-- "<deadline>:<JSON>": readers compare the deadline in the value, with no script. Changes are
-- published on the cache's channel: "k<key>" for an entry, "c" for a clear.
--
-- KEYS[1]  the cache's hash, e.g. lock:cache:{products}
-- KEYS[2]  its deadlines and write stamps (stamps.lua), e.g. lock:cache:{products}:deadlines
-- ARGV[1], ARGV[2]  as in stamps.lua
-- ARGV[3]  the entry's key
-- ARGV[4]  the value (JSON)
-- ARGV[5]  the TTL in milliseconds
--
-- Returns 1 and the server's time in µs.
local us = now_us()
local now = math.floor(us / 1000)
remove_expired(now)
remove_old_stamps(us)
store(ARGV[3], ARGV[4], now + tonumber(ARGV[5]))
stamp(ARGV[3], us)
expire_cache(now)
redis.call('SPUBLISH', ARGV[1], 'k' .. ARGV[3])
return { 1, us }
