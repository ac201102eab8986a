-- Clear a cache: unlink both its keys, whatever their size, freeing them off the main thread
-- (KEYS and ARGV[1] as in put.lua).
--
-- Returns 1 if it had a live entry, else 0.
local had_live = any_live()
redis.call('UNLINK', KEYS[1], KEYS[2])
redis.call('SPUBLISH', ARGV[1], 'c')
return had_live
