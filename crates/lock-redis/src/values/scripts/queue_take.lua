-- Take items of a queue for a consumer (KEYS as in queue_push.lua).
--
-- ARGV[1]  the consumer
-- ARGV[2]  the most items to take
-- ARGV[3]  the visibility timeout in milliseconds: items taken before and not acknowledged for
--          this long are taken again first
-- ARGV[4]  0, or the most consumers a group may have for this take to remove those that
--          left: nothing pending, idle past the visibility timeout (one that comes back is made
--          again by its next take)
--
-- Returns {crowded, id, item, deliveries, id, item, deliveries, …}: how many consumers the
-- group has when there were more than ARGV[4] to look through (else 0), then the reclaimed
-- items and the new ones.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return { 0 }
end
local max = tonumber(ARGV[2])

-- XAUTOCLAIM from `cursor`; the group is made again if something removed it (NOGROUP), and its
-- items are then taken anew.
local function autoclaim(cursor, count)
  local command = { 'XAUTOCLAIM', KEYS[1], 'consumers', ARGV[1], ARGV[3], cursor, 'COUNT', count }
  local claimed = redis.pcall(unpack(command))
  if claimed.err and string.find(claimed.err, 'NOGROUP', 1, true) then
    redis.call('XGROUP', 'CREATE', KEYS[1], 'consumers', '0')
    claimed = redis.pcall(unpack(command))
  end
  if claimed.err then
    error(claimed)
  end
  return claimed
end

-- Reclaimed first, in id order: XAUTOCLAIM looks at up to 10 taken items per item it may
-- claim, so it is called again from where it stopped, over at most 10,000 taken items.
local entries, cursor, looked = {}, '0-0', 0
repeat
  local count = max - #entries
  local claimed = autoclaim(cursor, count)
  cursor = claimed[1]
  for _, entry in ipairs(claimed[2]) do
    entries[#entries + 1] = entry
  end
  looked = looked + 10 * count
until #entries >= max or cursor == '0-0' or looked >= 10000
if #entries < max then
  local read = redis.call('XREADGROUP', 'GROUP', 'consumers', ARGV[1], 'COUNT', max - #entries,
    'STREAMS', KEYS[1], '>')
  if read then
    for _, entry in ipairs(read[1][2]) do
      entries[#entries + 1] = entry
    end
  end
end
-- The consumers that left. A user without the grants for it (docs/values.md) takes as before:
-- each command here may be refused without failing the take.
local function named(flat)
  local fields = {}
  for i = 1, #flat, 2 do
    fields[flat[i]] = flat[i + 1]
  end
  return fields
end
local most, crowded = tonumber(ARGV[4]), 0
if most > 0 then
  local groups = redis.pcall('XINFO', 'GROUPS', KEYS[1])
  local count = -1
  for _, flat in ipairs(groups.err and {} or groups) do
    local group = named(flat)
    if group.name == 'consumers' then
      count = group.consumers
    end
  end
  if count > most then
    crowded = count
  elseif count > 0 then
    local consumers = redis.pcall('XINFO', 'CONSUMERS', KEYS[1], 'consumers')
    for _, flat in ipairs(consumers.err and {} or consumers) do
      local consumer = named(flat)
      if consumer.pending == 0 and consumer.idle > tonumber(ARGV[3]) and consumer.name ~= ARGV[1] then
        redis.pcall('XGROUP', 'DELCONSUMER', KEYS[1], 'consumers', consumer.name)
      end
    end
  end
end
local reply = { crowded }
for _, entry in ipairs(entries) do
  local pending = redis.call('XPENDING', KEYS[1], 'consumers', entry[1], entry[1], 1)
  reply[#reply + 1] = entry[1]
  reply[#reply + 1] = entry[2][2]
  reply[#reply + 1] = pending[1] and pending[1][4] or 1
end
return reply
