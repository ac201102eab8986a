-- (scripts.rs prepends `#!lua flags=allow-oom` and the functions of lock_value.lua, which gives
-- the value grammar, and of fair_queue.lua.)
-- Release a lock if, and only if, this owner holds it.
--
-- KEYS[1]  the lock key
-- ARGV[1]  the owner token of the acquisition being released
-- ARGV[2]  the release channel (same hash tag as the key)
-- ARGV[3]  the tombstone TTL in milliseconds
-- ARGV[4]  optional: 'free' frees the key even within its minimum hold (the clean-up of a
--          grant whose reply never reached a caller); else a minimum hold is kept (see below)
-- KEYS[2], KEYS[3]  optional: the key's queue of fair waiters and their timeouts (see
--          fair_acquire.lua)
--
-- Returns 1 + the number of clients that received the release message if this owner held the
-- lock (now released, waiters notified) — at least 1 —, and 0 if not (expired, or held by another
-- owner: then nothing is touched). The receivers tell the releasing client whether other
-- clients are waiting for the lock.
--
-- The release message is the fencing token of the released grant, followed by "|<owner token>"
-- of the first fair waiter when any is queued (after evicting those whose time ran out), so that
-- waiter's client wakes exactly it. It is sent only when a client is subscribed to ARGV[2]:
-- every waiter, fair or not, subscribes before the attempt after which it sleeps, so with no
-- subscriber nobody sleeps on this key, and the queue is not looked at either (fair_acquire.lua
-- evicts expired waiters itself). One PUBSUB SHARDNUMSUB takes the place of ZCARD and SPUBLISH.
--
-- Instead of deleting the key it leaves a tombstone "R|<token>|<owner>" for ARGV[3] ms. The
-- tombstone keeps the fencing token counting up, and makes the script idempotent: a re-sent copy
-- finds its own tombstone — or, if a waiter took the key in between, its owner token as the new
-- grant's previous owner — and reports "released" (1) without publishing again.
--
-- Minimum hold: when the grant carries a <hold until> (server time, ms) still in the future, the
-- key is not freed but kept, as "M|…" (the rest of the value unchanged): owner-checked like any
-- release, never renewed (renewal renews H only), and free when the hold ends — every script
-- then reads it as this owner's tombstone (lock_value.lua), which the key's TTL (the rest of
-- the hold plus ARGV[3]) keeps as long as any other tombstone. The message is published all the
-- same: waiters that slept on the lease's longer TTL re-read the key, find it held for the rest
-- of the hold, and wait for that. A re-sent copy finds M (or, after the hold, that tombstone)
-- with its own owner and reports "released" without publishing again.
-- The time comes from the server (TIME), never from a client.
--
-- allow-oom: a release must work when Redis is at maxmemory (noeviction); the tombstone takes the
-- place of the held value, so it needs no more memory.
local lock = read_lock(KEYS[1])
if not lock then
  return 0
end
if lock.owner ~= ARGV[1] then
  if lock.state ~= 'R' and lock.previous == ARGV[1] then
    return 1
  end
  return 0
end
if lock.state ~= 'H' then
  return 1
end
local hold_until = tonumber(lock.hold_until)
local now_ms = 0
if hold_until then
  now_ms = select(2, server_clock())
end
if hold_until and hold_until > now_ms and ARGV[4] ~= 'free' then
  -- A watchdog lease's TTL may end sooner (the holder stopped renewing it): the hold sets it.
  -- A fixed lease never ends sooner: the client accepts a minimum hold only within the lease.
  redis.call('SET', KEYS[1], 'M' .. string.sub(lock.value, 2), 'PX',
    hold_until - now_ms + tonumber(ARGV[3]))
else
  redis.call('SET', KEYS[1], 'R|' .. lock.token .. '|' .. lock.owner, 'PX', ARGV[3])
end
-- pcall: a user whose ACL lacks the count (written for an earlier version) publishes as before.
local subscribers = redis.pcall('PUBSUB', 'SHARDNUMSUB', ARGV[2])
if type(subscribers) == 'table' and subscribers[2] == 0 then
  return 1
end
local message = lock.token
if KEYS[3] then
  message = release_message(lock.token)
end
return 1 + redis.call('SPUBLISH', ARGV[2], message)
