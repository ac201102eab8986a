-- Invalidate an entry (KEYS and ARGV[1] as in put.lua).
--
-- ARGV[2]  the entry's key
--
-- Returns 1 if it was live, else 0.
local deadline = redis.call('ZSCORE', KEYS[2], ARGV[2])
redis.call('HDEL', KEYS[1], ARGV[2])
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('SPUBLISH', ARGV[1], 'k' .. ARGV[2])
if deadline and tonumber(deadline) > now_ms() then
  return 1
end
return 0
