-- Take items of a queue for a consumer (KEYS as in queue_push.lua).
--
-- ARGV[1]  the consumer
-- ARGV[2]  the most items to take
-- ARGV[3]  the visibility timeout in milliseconds: items taken before and not acknowledged for
--          this long are taken again first
--
-- Returns {id, item, deliveries, id, item, deliveries, …}: reclaimed items, then new ones.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {}
end
local max = tonumber(ARGV[2])
local entries = redis.call('XAUTOCLAIM', KEYS[1], 'consumers', ARGV[1], ARGV[3], '0-0', 'COUNT', max)[2]
if #entries < max then
  local read = redis.call('XREADGROUP', 'GROUP', 'consumers', ARGV[1], 'COUNT', max - #entries,
    'STREAMS', KEYS[1], '>')
  if read then
    for _, entry in ipairs(read[1][2]) do
      entries[#entries + 1] = entry
    end
  end
end
local reply = {}
for _, entry in ipairs(entries) do
  local pending = redis.call('XPENDING', KEYS[1], 'consumers', entry[1], entry[1], 1)
  reply[#reply + 1] = entry[1]
  reply[#reply + 1] = entry[2][2]
  reply[#reply + 1] = pending[1] and pending[1][4] or 1
end
return reply
