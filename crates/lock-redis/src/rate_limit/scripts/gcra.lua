-- GCRA on the server's clock, for the charges of one or more calls, each call's charges decided
-- together (the steps of lock-core's rate_limit/gcra.rs).
-- KEYS[i]: the state of charge i, "<tat>:<interval>" in microseconds: the TAT since
-- 2023-11-14 22:13:20 UTC (Unix time 1,700,000,000, so that a double keeps it to a hundredth of
-- a microsecond) by the server's TIME, the interval as the charge that wrote it sent it.
-- ARGV[4i-3], ARGV[4i-2], ARGV[4i-1]: charge i's emission interval (µs), burst and cost;
-- ARGV[4i]: 1 when charge i is the last of its call, else 0.
-- Replies per charge: allowed (1 or 0), remaining, retry-after (µs), reset-after (µs).
-- A call's charges are all made when all are allowed, and the calls are decided in order, each
-- seeing what the ones before it charged. A state charged at another interval is converted to
-- the new one, and written so, whether or not its charge is made. Each state changed is written
-- once, with the TTL of its reset-after.
local time = redis.call('TIME')
local now = (tonumber(time[1]) - 1700000000) * 1000000 + tonumber(time[2])
-- Rounding room: a decision is not flipped by the last bits of a double.
local eps = 0.5
-- The most a state may owe (720 h): beyond it, a state this script did not write, at rest.
local max_owed = 2592000000000
-- Per key, its state as the calls decided so far left it: { tat, interval text }.
local states, changed = {}, {}

local function read(key)
  local state = states[key]
  if state then
    return state
  end
  state = { now, nil }
  local stored = redis.call('GET', key)
  if stored then
    local colon = string.find(stored, ':', 1, true)
    local old_tat = colon and tonumber(string.sub(stored, 1, colon - 1))
    local old_text = colon and string.sub(stored, colon + 1)
    local old_interval = old_text and tonumber(old_text)
    if old_tat and old_interval and old_tat > now and old_tat - now <= max_owed
        and old_interval > 0 and old_interval < math.huge then
      state = { old_tat, old_text }
    end
  end
  states[key] = state
  return state
end

local function write(key, tat, interval_text)
  if not states[key][3] then
    changed[#changed + 1] = key
  end
  states[key] = { tat, interval_text, true }
end

local reply, charged, all = {}, {}, true
for i, key in ipairs(KEYS) do
  local interval_text = ARGV[4 * i - 3]
  local interval = tonumber(interval_text)
  local burst = tonumber(ARGV[4 * i - 2])
  local cost = tonumber(ARGV[4 * i - 1])
  local state = read(key)
  local tat = state[1]
  if tat > now and state[2] ~= interval_text then
    -- Owed time converted to the new interval: the requests owed stay owed.
    tat = now + math.min((tat - now) * interval / tonumber(state[2]), max_owed)
    write(key, tat, interval_text)
  end
  tat = math.max(tat, now)
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
  if ARGV[4 * i] == '1' then
    if all then
      for _, charge in ipairs(charged) do
        write(charge[1], charge[2], charge[3])
      end
    end
    charged, all = {}, true
  end
end

for _, key in ipairs(changed) do
  local state = states[key]
  local ttl = math.max(1, math.ceil((state[1] - now) / 1000))
  redis.call('SET', key, string.format('%.17g:', state[1]) .. state[2], 'PX', ttl)
end
return reply
