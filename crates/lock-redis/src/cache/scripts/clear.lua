-- Clear a cache: unlink both its keys, whatever their size, freeing them off the main thread,
-- and stamp the clear (KEYS, ARGV[1] and ARGV[2] as in put.lua). A key of another type in
-- their place is unlinked too.
--
-- Returns 1 if it had a live entry, else 0; and the server's time in µs.
local us = now_us()
local now = math.floor(us / 1000)
local live = redis.pcall('ZCOUNT', KEYS[2], '(' .. now, BELOW_STAMPS)
redis.call('UNLINK', KEYS[1], KEYS[2])
stamp('', us)
redis.call('PEXPIREAT', KEYS[2], now + window)
redis.call('SPUBLISH', ARGV[1], 'c')
if type(live) == 'number' and live > 0 then
  return { 1, us }
end
return { 0, us }
