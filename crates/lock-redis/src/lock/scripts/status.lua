-- (scripts.rs prepends `#!lua flags=no-writes,allow-stale` and the functions of lock_value.lua.)
-- Read a lock's state in one atomic step, for operators (status and list; never written).
--
-- KEYS[1]  the lock key
-- KEYS[2]  the key's queue of fair waiters
--
-- Returns {<lock value, or false when there is no key>, <how long it stays in its state, in ms:
-- the PTTL of the lock key (-2: no key), or the rest of a minimum hold>, <number of queued fair
-- waiters>, <the value parsed as {state, fencing token, owner}, or false when there is no key or
-- it holds something that is not a lock>}: the value is parsed here, by the same function as
-- every other script's (so an M whose hold has ended reads as the tombstone R).
-- Read-only, so trivially idempotent.
local value = redis.call('GET', KEYS[1])
local ttl = redis.call('PTTL', KEYS[1])
local lock = false
if value then
  lock = parse_lock(value)
  local held_for = lock and lock_ttl(KEYS[1], lock)
  if held_for then
    ttl = held_for
    lock = {lock.state, lock.token, lock.owner}
  else
    lock = false
  end
end
return {value, ttl, redis.call('ZCARD', KEYS[2]), lock}
