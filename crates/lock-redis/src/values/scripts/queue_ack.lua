-- Acknowledge taken items of a queue, removing them (KEYS as in queue_push.lua).
--
-- ARGV[1…] the items' ids
--
-- Returns how many of them were pending.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local acked = redis.call('XACK', KEYS[1], 'consumers', unpack(ARGV))
redis.call('XDEL', KEYS[1], unpack(ARGV))
return acked
