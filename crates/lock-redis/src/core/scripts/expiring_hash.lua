-- Shared by the scripts of a hash whose entries expire one by one (a TTL map, a cache): the
-- hash KEYS[1], and the sorted set KEYS[2] of entry → deadline, the server time in ms at which
-- the entry expires. Redis 7.0 has no per-field expiry; on 7.4 and Valkey 9, HPEXPIRE on the
-- hash's fields would take the sorted set's place. An entry past its deadline is never
-- returned; writes remove up to 100 of them, and both keys expire with the last entry.

-- The server's time in ms.
local function now_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- Whether `entry` has a deadline after `now`.
local function is_live(entry, now)
  local deadline = redis.call('ZSCORE', KEYS[2], entry)
  return deadline and tonumber(deadline) > now
end

-- Removes up to 100 entries whose deadline is at or before `now`: bounded work per write.
local function remove_expired(now)
  local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 100)
  if #expired > 0 then
    redis.call('HDEL', KEYS[1], unpack(expired))
    redis.call('ZREM', KEYS[2], unpack(expired))
  end
end

-- Both keys expire with the last entry, the highest score below `below` (a score bound, such
-- as '+inf'), or at `at_least` if that is later.
local function expire_keys(below, at_least)
  local last = redis.call('ZRANGE', KEYS[2], below, '-inf', 'BYSCORE', 'REV', 'LIMIT', 0, 1,
    'WITHSCORES')
  local at = at_least
  if last[2] and tonumber(last[2]) > at then
    at = tonumber(last[2])
  end
  redis.call('PEXPIREAT', KEYS[1], at)
  redis.call('PEXPIREAT', KEYS[2], at)
end

-- Stores `value` at `entry` until `deadline`, without setting the keys' expiry.
local function set_entry(entry, value, deadline)
  redis.call('HSET', KEYS[1], entry, value)
  redis.call('ZADD', KEYS[2], deadline, entry)
end

-- Stores `value` at `entry` until `deadline`; both keys then expire with the last entry.
local function put_entry(entry, value, deadline)
  set_entry(entry, value, deadline)
  expire_keys('+inf', 0)
end

-- Removes `entry`; returns 1 if it was live, else 0.
local function remove_entry(entry)
  local was_live = is_live(entry, now_ms())
  redis.call('HDEL', KEYS[1], entry)
  redis.call('ZREM', KEYS[2], entry)
  if was_live then
    return 1
  end
  return 0
end

-- Raises WRONGTYPE, as a command on it would, when the hash is a key of another type: a read
-- that finds no deadline must not answer for another program's key as for an empty hash.
local function check_hash()
  redis.call('HGET', KEYS[1], '')
end

-- 1 if the hash has a live entry, else 0: 0 when the deadlines are a key of another type,
-- which a clear then deletes.
local function any_live()
  local live = redis.pcall('ZCOUNT', KEYS[2], '(' .. now_ms(), '+inf')
  if type(live) == 'number' and live > 0 then
    return 1
  end
  return 0
end
