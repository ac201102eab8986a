#!lua flags=allow-oom
-- Take a fair waiter out of the queue (it gave up, failed or was dropped) and, if it was first
-- and the lock is free, tell the next waiter.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the queue (see fair_acquire.lua)
-- KEYS[3]  the timeouts (see fair_acquire.lua)
-- ARGV[1]  the owner token of the waiter
-- ARGV[2]  the release channel (same hash tag as the key)
--
-- Returns 1 if the waiter was queued, 0 if not. The message, "0|<next owner token>", has the
-- shape of a release message without a fencing token: it wakes just that waiter.
--
-- allow-oom: it only removes; a waiter must be able to leave when Redis is at maxmemory.
local rank = redis.call('ZRANK', KEYS[2], ARGV[1])
if not rank then
  return 0
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
if not last[2] then
  redis.call('DEL', KEYS[2], KEYS[3])
  return 1
end
redis.call('PEXPIREAT', KEYS[2], last[2])
redis.call('PEXPIREAT', KEYS[3], last[2])
if rank == 0 then
  local value = redis.call('GET', KEYS[1])
  if not value or string.sub(value, 1, 1) == 'R' then
    local next_owner = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
    redis.call('SPUBLISH', ARGV[2], '0|' .. next_owner)
  end
end
return 1
