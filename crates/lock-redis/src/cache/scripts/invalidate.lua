-- Invalidate an entry (KEYS and ARGV[1] as in put.lua).
--
-- ARGV[2]  the entry's key
--
-- Returns 1 if it was live, else 0.
local was_live = remove_entry(ARGV[2])
redis.call('SPUBLISH', ARGV[1], 'k' .. ARGV[2])
return was_live
