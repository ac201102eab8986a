#!lua flags=allow-oom
-- Take a fair waiter out of the queue (it gave up, failed or was dropped) and, if the lock is
-- free, tell the waiter now first.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the queue (see fair_acquire.lua)
-- KEYS[3]  the timeouts (see fair_acquire.lua)
-- ARGV[1]  the owner token of the waiter
-- ARGV[2]  the release channel (same hash tag as the key)
--
-- Returns 1 if the waiter was queued, 0 if not. Evicts the waiters whose time ran out first, so
-- the waiter it tells is a live one. The message, "0|<next owner token>", has the shape of a
-- release message without a fencing token: it wakes just that waiter.
--
-- allow-oom: it only removes; a waiter must be able to leave when Redis is at maxmemory.
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  return 0
end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
gone[#gone + 1] = ARGV[1]
for i = 1, #gone, 100 do
  local batch = {unpack(gone, i, math.min(i + 99, #gone))}
  redis.call('ZREM', KEYS[2], unpack(batch))
  redis.call('ZREM', KEYS[3], unpack(batch))
end
local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
if not last[2] then
  redis.call('DEL', KEYS[2], KEYS[3])
  return 1
end
redis.call('PEXPIREAT', KEYS[2], last[2])
redis.call('PEXPIREAT', KEYS[3], last[2])
local next_owner = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
-- The lock free with a waiter first: that waiter may have been behind this one, or been told
-- while a dead one was first, so tell it (at worst one extra attempt).
if next_owner then
  local value = redis.call('GET', KEYS[1])
  if not value or string.sub(value, 1, 1) == 'R' then
    redis.call('SPUBLISH', ARGV[2], '0|' .. next_owner)
  end
end
return 1
