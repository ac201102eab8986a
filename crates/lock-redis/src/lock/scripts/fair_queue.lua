-- Functions shared by the scripts that touch a key's queue of fair waiters (KEYS[2]) and their
-- timeouts (KEYS[3]); see fair_acquire.lua. scripts.rs puts this file in front of each of those
-- scripts, since a Redis script cannot load another.

-- The server's time in milliseconds.
local function server_ms()
  local clock = redis.call('TIME')
  return tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
end

-- Takes `waiters` (owner tokens) out of the queue and the timeouts, 100 at a time: unpack has
-- a limit on how many values it returns.
local function remove_waiters(waiters)
  for i = 1, #waiters, 100 do
    local batch = {unpack(waiters, i, math.min(i + 99, #waiters))}
    redis.call('ZREM', KEYS[2], unpack(batch))
    redis.call('ZREM', KEYS[3], unpack(batch))
  end
end

-- Makes the queue and the timeouts expire with their last place, or deletes both when no place
-- is left, so they never outlive their waiters. Returns whether a place is left.
local function expire_queue()
  local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
  if not last[2] then
    redis.call('DEL', KEYS[2], KEYS[3])
    return false
  end
  redis.call('PEXPIREAT', KEYS[2], last[2])
  redis.call('PEXPIREAT', KEYS[3], last[2])
  return true
end

-- The message that releases a grant with fencing token `token`: the token, followed by
-- "|<owner token>" of the first fair waiter when one is queued once those whose time ran out are
-- evicted, so that waiter's client wakes exactly it. A queue left empty is deleted.
local function release_message(token)
  if redis.call('ZCARD', KEYS[3]) == 0 then
    return token
  end
  remove_waiters(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', server_ms()))
  local first = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if first then
    return token .. '|' .. first
  end
  redis.call('DEL', KEYS[2], KEYS[3])
  return token
end
