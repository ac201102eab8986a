-- Clear a cache: unlink both its keys, whatever their size, freeing them off the main thread
-- (KEYS and ARGV[1] as in put.lua).
--
-- Returns 1 if it had a live entry, else 0.
local live = redis.call('ZCOUNT', KEYS[2], '(' .. now_ms(), '+inf')
redis.call('UNLINK', KEYS[1], KEYS[2])
redis.call('SPUBLISH', ARGV[1], 'c')
if live > 0 then
  return 1
end
return 0
