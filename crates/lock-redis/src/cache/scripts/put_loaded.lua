-- Put a loaded entry, unless it was written since the load's mark (KEYS and ARGV[1…5] as in
-- put.lua).
--
-- ARGV[6]  the mark: the server's time in µs, at or before the load's read
--
-- Returns 1 if it stored the entry, 0 if a put, invalidation or clear came after the mark; and
-- the server's time in µs.
local us = now_us()
local mark = tonumber(ARGV[6])
if written_since(ARGV[3], mark) or written_since('', mark) then
  return { 0, us }
end
local now = math.floor(us / 1000)
remove_expired(now)
remove_old_stamps(us)
store(ARGV[3], ARGV[4], now + tonumber(ARGV[5]))
expire_cache(now)
redis.call('SPUBLISH', ARGV[1], 'k' .. ARGV[3])
return { 1, us }
