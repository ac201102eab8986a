-- Read an entry for a load: the field and the server's time, on the entry's own server, so
-- that every write after this read is stamped later than the time it returns (stamps.lua).
--
-- KEYS[1]  the cache's hash, e.g. lock:cache:{products}
-- ARGV[1]  the entry's key
--
-- Returns the server's time in µs, and "<deadline>:<JSON>" or nil.
local time = redis.call('TIME')
local us = tonumber(time[1]) * 1000000 + tonumber(time[2])
return { us, redis.call('HGET', KEYS[1], ARGV[1]) }
