-- Invalidate an entry (KEYS and ARGV[1…3] as in put.lua).
--
-- Returns 1 if it was live, else 0; and the server's time in µs.
local us = now_us()
local was_live = remove_entry(ARGV[3])
remove_old_stamps(us)
stamp(ARGV[3], us)
expire_cache(math.floor(us / 1000))
redis.call('SPUBLISH', ARGV[1], 'k' .. ARGV[3])
return { was_live, us }
