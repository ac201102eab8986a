-- (scripts.rs prepends `#!lua flags=allow-oom` and the functions of lock_value.lua and
-- fair_queue.lua.)
-- Force the release of a lock, whoever holds it (an operator's "force unlock").
--
-- KEYS[1]  the lock key
-- KEYS[2], KEYS[3]  the key's queue of fair waiters and their timeouts (see fair_acquire.lua)
-- ARGV[1]  the release channel (same hash tag as the key)
-- ARGV[2]  the tombstone TTL in milliseconds
-- ARGV[3]  optional: the fencing token of the grant to release (decimal). An operator confirms
--          the holder they were shown; if the lock has changed hands since, freeing the new
--          holder's grant would be a release nobody asked for.
--
-- Returns {0} if the key is not held (absent, a tombstone or not a lock value — a lock-like
-- value without a TTL included: nothing is touched); {2, <holder's owner token>, <fencing token>} if ARGV[3] is given and the key holds
-- another grant (nothing is touched); else {1, <holder's owner token>, <fencing token>,
-- <clients that received the release message>}.
--
-- Like release.lua it leaves a tombstone, so later grants keep counting the fencing token up,
-- and publishes the same message, naming the first fair waiter (after evicting those whose time
-- ran out), so waiters are woken at once. The tombstone's owner is "<holder>#forced": never a
-- real owner token (those end in a counter), so the old holder's own release — and its watchdog
-- renewal — find the lock not theirs (NotHeld, lost) instead of taking the tombstone for their
-- own release. Idempotent: a re-sent copy finds no held key and returns {0}.
--
-- A key kept for its holder's minimum hold (M, see release.lua) is held: the forced release
-- frees it at once — an operator's release ignores the minimum hold.
--
-- allow-oom: as release.lua, it must work when Redis is at maxmemory (noeviction).
local lock = read_lock_and_ttl(KEYS[1])
if not lock or lock.state == 'R' then
  return {0}
end
if ARGV[3] and lock.token ~= ARGV[3] then
  return {2, lock.owner, lock.token}
end
redis.call('SET', KEYS[1], 'R|' .. lock.token .. '|' .. lock.owner .. '#forced', 'PX', ARGV[2])
local message = release_message(lock.token)
return {1, lock.owner, lock.token, redis.call('SPUBLISH', ARGV[1], message)}
