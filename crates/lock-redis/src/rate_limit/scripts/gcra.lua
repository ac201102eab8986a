-- GCRA on the server's clock, for one or more charges decided together (the steps of
-- lock-core's rate_limit/gcra.rs).
-- KEYS[i]: the state of charge i, "<tat>:<interval>" in microseconds: the TAT since
-- 2023-11-14 22:13:20 UTC (Unix time 1,700,000,000, so that a double keeps it to a hundredth of
-- a microsecond) by the server's TIME, the interval as the charge that wrote it sent it.
-- ARGV[3i-2], ARGV[3i-1], ARGV[3i]: charge i's emission interval (µs), burst and cost.
-- Replies per charge: allowed (1 or 0), remaining, retry-after (µs), reset-after (µs).
-- Every charge is written, with the TTL of its reset-after, when all are allowed. A state charged
-- at another interval is written converted to the new one when its charge is not made.
local time = redis.call('TIME')
local now = (tonumber(time[1]) - 1700000000) * 1000000 + tonumber(time[2])
-- Rounding room: a decision is not flipped by the last bits of a double.
local eps = 0.5
-- The most a state may owe (720 h): beyond it, a state this script did not write, at rest.
local max_owed = 2592000000000
local reply, charged, converted, all = {}, {}, {}, true
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
    local old_text = colon and string.sub(state, colon + 1)
    local old_interval = old_text and tonumber(old_text)
    if old_tat and old_interval and old_tat > now and old_tat - now <= max_owed
        and old_interval > 0 and old_interval < math.huge then
      if old_text == interval_text then
        tat = old_tat
      else
        -- Owed time converted to the new interval: the requests owed stay owed.
        tat = now + math.min((old_tat - now) * interval / old_interval, max_owed)
        converted[#converted + 1] = { key, tat, interval_text }
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
      charged[#charged + 1] = { key, new_tat, interval_text }
    end
  else
    all = false
    reply[#reply + 1] = 0
    reply[#reply + 1] = math.max(0, math.floor((now + capacity - tat + eps) / interval))
    reply[#reply + 1] = math.ceil(new_tat - now - capacity)
    reply[#reply + 1] = math.ceil(tat - now)
  end
end
-- Converted states first, so that a charge of the same key writes over them.
local writes = converted
if all then
  for _, write in ipairs(charged) do
    writes[#writes + 1] = write
  end
end
for _, write in ipairs(writes) do
  local ttl = math.max(1, math.ceil((write[2] - now) / 1000))
  redis.call('SET', write[1], string.format('%.17g:', write[2]) .. write[3], 'PX', ttl)
end
return reply
