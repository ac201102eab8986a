-- The cache's write stamps, beside the entries in the deadlines set KEYS[2]: a put or an
-- invalidation stamps "\1<key>", a clear "\1", scored STAMPS + the server's time in µs, so
-- that a loaded value is stored only if its entry was not written at or after the load's mark.
-- STAMPS puts them above every deadline (ms), out of the entries' range; they live ARGV[2] ms,
-- the window in which a load's value may be stored.
--
-- ARGV[1]  the cache's channel, e.g. lock:cache:{products}:changed
-- ARGV[2]  the window, in ms

local STAMPS = 1125899906842624 -- 2^50, beyond any deadline; with a time in µs, exact in a double
-- The scores of entries alone, as a bound of ZRANGE and ZCOUNT.
local BELOW_STAMPS = string.format('(%d', STAMPS)
local window = tonumber(ARGV[2])

-- The server's time in µs.
local function now_us()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000000 + tonumber(time[2])
end

-- Notes a write of `key` ("" for the whole cache) at `us`.
local function stamp(key, us)
  redis.call('ZADD', KEYS[2], STAMPS + us, '\1' .. key)
end

-- Whether `key` ("" for the whole cache) was written at or after `mark` (µs).
local function written_since(key, mark)
  local at = redis.call('ZSCORE', KEYS[2], '\1' .. key)
  return at ~= false and tonumber(at) - STAMPS >= mark
end

-- Removes up to 100 stamps older than the window: bounded work per write.
local function remove_old_stamps(us)
  local old = redis.call('ZRANGEBYSCORE', KEYS[2], STAMPS, STAMPS + us - window * 1000, 'LIMIT', 0,
    100)
  if #old > 0 then
    redis.call('ZREM', KEYS[2], unpack(old))
  end
end

-- Stores `value` (JSON) at `key` until `deadline`, as "<deadline>:<JSON>".
local function store(key, value, deadline)
  set_entry(key, deadline .. ':' .. value, deadline)
end

-- Both keys expire with the last entry, or when the window after `now` ends if later.
local function expire_cache(now)
  expire_keys(BELOW_STAMPS, now + window)
end
