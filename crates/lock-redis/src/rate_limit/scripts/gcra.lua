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
-- The most a state may owe (720 h); beyond it and a charge's rounding room, a state this script
-- did not write, at rest.
local max_owed = 2592000000000

-- A key's TAT and the interval text it was charged at; `now` and nil when it has none in force
-- (none, or one no quota writes: an interval under 1 µs or over 720 h).
local function load(key)
  local stored = redis.call('GET', key)
  if stored then
    local tat_text, text = string.match(stored, '^([^:]*):(.*)$')
    local tat, interval = tonumber(tat_text), tonumber(text)
    if tat and interval and tat > now and tat - now <= max_owed + 2 * eps
        and interval >= 1 and interval <= max_owed then
      return tat, text
    end
  end
  return now, nil
end

-- A TAT charged at the interval `text` converted to `interval`: the requests owed stay owed.
local function convert(tat, text, interval)
  return now + math.min((tat - now) * interval / tonumber(text), max_owed)
end

-- Appends a charge's four replies to `reply`; returns the TAT it writes if made, nil if denied.
local function decide(reply, tat, interval, burst, cost)
  tat = math.max(tat, now)
  local capacity = burst * interval
  local new_tat = tat + cost * interval
  local n = #reply
  if new_tat - now <= capacity + eps then
    reply[n + 1] = 1
    reply[n + 2] = math.floor((now + capacity - new_tat + eps) / interval)
    reply[n + 3] = 0
    reply[n + 4] = math.ceil(new_tat - now)
    return new_tat
  end
  reply[n + 1] = 0
  reply[n + 2] = math.max(0, math.floor((now + capacity - tat + eps) / interval))
  reply[n + 3] = math.ceil(new_tat - now - capacity)
  reply[n + 4] = math.ceil(tat - now)
  return nil
end

local function store(key, tat, text)
  local ttl = math.max(1, math.ceil((tat - now) / 1000))
  redis.call('SET', key, string.format('%.17g:%s', tat, text), 'PX', ttl)
end

local reply = {}

-- One charge, the common call: no bookkeeping across charges.
if #KEYS == 1 then
  local text, cost = ARGV[1], tonumber(ARGV[3])
  local interval = tonumber(text)
  local tat, old_text = load(KEYS[1])
  local changed = old_text ~= nil and old_text ~= text
  if changed then
    tat = convert(tat, old_text, interval)
  end
  local new_tat = decide(reply, tat, interval, tonumber(ARGV[2]), cost)
  if new_tat and cost > 0 then
    tat, changed = new_tat, true
  end
  if changed then
    store(KEYS[1], tat, text)
  end
  return reply
end

-- Per key, its state as the calls decided so far left it: its TAT and the interval text it was
-- charged at; `changed` lists the keys to write, in order, and marks each by name.
local tats, texts, changed = {}, {}, {}
-- The current call's charges, from index `first`: the TAT each would write (false: cost 0).
local pending, first, all = {}, 1, true

local function change(key, tat, text)
  tats[key], texts[key] = tat, text
  if not changed[key] then
    changed[key] = true
    changed[#changed + 1] = key
  end
end

for i = 1, #KEYS do
  local key, text = KEYS[i], ARGV[4 * i - 3]
  local interval, cost = tonumber(text), tonumber(ARGV[4 * i - 1])
  local tat = tats[key]
  if not tat then
    tat, texts[key] = load(key)
    tats[key] = tat
  end
  if tat > now and texts[key] ~= text then
    tat = convert(tat, texts[key], interval)
    change(key, tat, text)
  end
  local new_tat = decide(reply, tat, interval, tonumber(ARGV[4 * i - 2]), cost)
  if new_tat then
    pending[i] = cost > 0 and new_tat
  else
    all = false
  end
  if ARGV[4 * i] == '1' then
    if all then
      for j = first, i do
        if pending[j] then
          change(KEYS[j], pending[j], ARGV[4 * j - 3])
        end
      end
    end
    first, all = i + 1, true
  end
end

for _, key in ipairs(changed) do
  store(key, tats[key], texts[key])
end
return reply
