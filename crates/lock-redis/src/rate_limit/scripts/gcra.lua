-- GCRA on the server's clock, for one or more charges decided together.
-- KEYS[i]: the state of charge i, "<tat>:<interval>" in microseconds: the TAT since
-- 2023-11-14 22:13:20 UTC (Unix time 1,700,000,000, so that a double keeps it to a hundredth of
-- a microsecond) by the server's TIME, the interval as the charge that wrote it sent it.
-- ARGV[3i-2], ARGV[3i-1], ARGV[3i]: charge i's emission interval (µs), burst and cost.
-- Replies per charge: allowed (1 or 0), remaining, retry-after (µs), reset-after (µs).
-- Every charge is written, with the TTL of its reset-after, when all are allowed; none otherwise.
local time = redis.call('TIME')
local now = (tonumber(time[1]) - 1700000000) * 1000000 + tonumber(time[2])
-- Rounding room: a decision is not flipped by the last bits of a double.
local eps = 0.5
local reply, writes, all = {}, {}, true
for i, key in ipairs(KEYS) do
  local interval_text = ARGV[3 * i - 2]
  local interval = tonumber(interval_text)
  local burst = tonumber(ARGV[3 * i - 1])
  local cost = tonumber(ARGV[3 * i])
  local tat = now
  local state = redis.call('GET', key)
  if state then
    local colon = string.find(state, ':', 1, true)
    local old_tat = colon and tonumber(string.sub(state, 1, colon - 1))
    if old_tat and old_tat > now then
      local old_text = string.sub(state, colon + 1)
      local old_interval = tonumber(old_text)
      if old_text == interval_text then
        tat = old_tat
      elseif old_interval and old_interval > 0 then
        -- Owed time converted to the new interval: the requests owed stay owed.
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
      writes[#writes + 1] = { key, new_tat, interval_text }
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
    redis.call('SET', write[1], string.format('%.17g:', write[2]) .. write[3], 'PX', ttl)
  end
end
return reply
