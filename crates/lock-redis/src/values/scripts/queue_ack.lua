-- Acknowledge taken items of a queue, removing them (KEYS as in queue_push.lua).
--
-- ARGV[1…] the items' ids
--
-- Returns how many of them were pending; or, when one of them is an item no take gave (it is
-- in the stream and not pending), {that id}, acknowledging nothing. An id not in the stream
-- was acknowledged already, or never pushed.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
for _, id in ipairs(ARGV) do
  if #redis.call('XPENDING', KEYS[1], 'consumers', id, id, 1) == 0
      and #redis.call('XRANGE', KEYS[1], id, id) > 0 then
    return { id }
  end
end
-- In slices: unpack stops at about 8,000 values.
local acked = 0
for first = 1, #ARGV, 1000 do
  local ids = { unpack(ARGV, first, math.min(first + 999, #ARGV)) }
  acked = acked + redis.call('XACK', KEYS[1], 'consumers', unpack(ids))
  redis.call('XDEL', KEYS[1], unpack(ids))
end
return acked
