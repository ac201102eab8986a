-- (scripts.rs prepends the functions of lock_value.lua, which gives the value grammar, and of
-- fair_queue.lua.)
-- Acquire a lock fairly: grant it to the first of the key's queue of fair waiters, or keep the
-- caller's place in that queue.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the queue: a sorted set of waiting owner tokens, scored by order of arrival
-- KEYS[3]  the timeouts: a sorted set of the same owner tokens, scored by the server time (ms)
--          at which each is evicted unless it calls again
-- ARGV[1]  the owner token of this acquisition
-- ARGV[2]  the lease TTL in milliseconds
-- ARGV[3]  how long this waiter's place is kept without another call, in milliseconds
-- ARGV[4]  'try': do not queue; 'wait': join the queue, or keep the place in it, when not
--          granted; 'last': the final attempt — leave the queue when not granted
--
-- Returns
--   {1, token}                granted; token is the fencing token of this grant
--   {0, holder, pttl, ahead}  held by another owner (H, or M: released within its minimum
--                             hold; pttl in ms); `ahead` waiters are queued ahead of this one
--   {3, ahead}                the lock is free, but `ahead` earlier waiters come first
--   {2}                       this owner's acquisition was already released (a late duplicate)
--   error "LOCKVALUE …"       the key holds something that is not a lock (including a
--                             held value without a TTL)
--
-- Every call first evicts the other waiters whose time ran out: a waiter that died stops
-- calling, and loses its place ARGV[3] after its last call. The caller itself is alive, so it
-- keeps a place nobody evicted yet, however late its call. Both sorted sets expire with their
-- last-evicted member and are deleted when empty, so they never outlive their waiters.
-- Idempotent per owner token, like acquire.lua.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local owner_token = ARGV[1]

local expired = {}
for _, waiter in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do
  if waiter ~= owner_token then
    expired[#expired + 1] = waiter
  end
end
remove_waiters(expired)

local function join()
  if not redis.call('ZSCORE', KEYS[2], owner_token) then
    local tail = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
    local arrival = 1
    if tail[2] then
      arrival = tonumber(tail[2]) + 1
    end
    redis.call('ZADD', KEYS[2], arrival, owner_token)
  end
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[3]), owner_token)
end

local function leave()
  redis.call('ZREM', KEYS[2], owner_token)
  redis.call('ZREM', KEYS[3], owner_token)
end

local function queue_as(mode)
  if mode == 'wait' then
    join()
  elseif mode == 'last' then
    leave()
  end
  expire_queue()
end

local function ahead()
  local rank = redis.call('ZRANK', KEYS[2], owner_token)
  if rank then
    return rank
  end
  return redis.call('ZCARD', KEYS[2])
end

local found, result, previous = find_for_acquire(KEYS[1], owner_token, ARGV[2])
if found == 'error' then
  return result
elseif found == 'own' then
  queue_as('last')
  return result
elseif found == 'held' then
  queue_as(ARGV[4])
  result[4] = ahead()
  return result
end
-- Free: `result` is the last fencing token.
local first = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
if first and first ~= owner_token then
  queue_as(ARGV[4])
  return {3, ahead()}
end

queue_as('last')
return {1, grant(KEYS[1], owner_token, ARGV[2], result, previous, tonumber(ARGV[5] or '0'))}
