-- (scripts.rs prepends `#!lua flags=allow-oom` and the functions of lock_value.lua and
-- fair_queue.lua.)
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
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', server_ms())
gone[#gone + 1] = ARGV[1]
remove_waiters(gone)
if not expire_queue() then
  return 1
end
local next_owner = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
-- The lock free with a waiter first: that waiter may have been behind this one, or been told
-- while a dead one was first, so tell it (at worst one extra attempt).
if next_owner then
  local lock = read_lock(KEYS[1])
  if lock == nil or (lock and lock.state == 'R') then
    redis.call('SPUBLISH', ARGV[2], '0|' .. next_owner)
  end
end
return 1
