-- GCRA on the server's clock, for one or more charges decided together.
-- KEYS[i]: the state of charge i, "<tat>:<interval>" in microseconds of TIME.
-- ARGV[3i-2], ARGV[3i-1], ARGV[3i]: charge i's emission interval (µs), burst and cost.
-- Replies per charge: allowed (1 or 0), remaining, retry-after (µs), reset-after (µs).
-- Every charge is written, with the TTL of its reset-after, when all are allowed; none otherwise.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local eps = 0.001
local reply, writes, all = {}, {}, true
for i, key in ipairs(KEYS) do
  local interval = tonumber(ARGV[3 * i - 2])
  local burst = tonumber(ARGV[3 * i - 1])
  local cost = tonumber(ARGV[3 * i])
  local tat = now
  local state = redis.call('GET', key)
  if state then
    local old_tat, old_interval = string.match(state, '^([^:]+):([^:]+)$')
    old_tat, old_interval = tonumber(old_tat), tonumber(old_interval)
    if old_tat and old_interval and old_interval > 0 and old_tat > now then
      -- Owed time converted to the new interval: the requests owed stay owed.
      if old_interval == interval then
        tat = old_tat
      else
        tat = now + (old_tat - now) * interval / old_interval
      end
    end
  end
  local capacity = burst * interval
  local new_tat = tat + cost * interval
  if new_tat - now <= capacity + eps then
    reply[#reply + 1] = 1
    reply[#reply + 1] = math.floor((now + capacity - new_tat + eps) / interval)
    reply[#reply + 1] = 0
    reply[#reply + 1] = math.ceil(new_tat - now)
    if cost > 0 then
      writes[#writes + 1] = { key, new_tat, interval }
    end
  else
    all = false
    reply[#reply + 1] = 0
    reply[#reply + 1] = math.max(0, math.floor((now + capacity - tat + eps) / interval))
    reply[#reply + 1] = math.ceil(new_tat - now - capacity)
    reply[#reply + 1] = math.ceil(tat - now)
  end
end
if all then
  for _, write in ipairs(writes) do
    local ttl = math.max(1, math.ceil((write[2] - now) / 1000))
    redis.call('SET', write[1], string.format('%.17g:%.17g', write[2], write[3]), 'PX', ttl)
  end
end
return reply
