-- (scripts.rs prepends `#!lua flags=allow-oom` and the functions of fair_queue.lua.)
-- Release a lock if, and only if, this owner holds it.
--
-- KEYS[1]  the lock key
-- ARGV[1]  the owner token of the acquisition being released
-- ARGV[2]  the release channel (same hash tag as the key)
-- ARGV[3]  the tombstone TTL in milliseconds
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
-- waiter's client wakes exactly it.
--
-- Instead of deleting the key it leaves a tombstone "R|<token>|<owner>" for ARGV[3] ms. The
-- tombstone keeps the fencing token counting up, and makes the script idempotent: a re-sent copy
-- finds its own tombstone — or, if a waiter took the key in between, its owner token as the new
-- grant's previous owner — and reports "released" (1) without publishing again.
--
-- allow-oom: a release must work when Redis is at maxmemory (noeviction); the tombstone takes the
-- place of the held value, so it needs no more memory.
local value = redis.call('GET', KEYS[1])
if not value then
  return 0
end
local state, token, owner, previous = string.match(value, '^([HR])|(%d+)|([^|]*)|?([^|]*)$')
if not state then
  return 0
end
if owner ~= ARGV[1] then
  if state == 'H' and previous == ARGV[1] then
    return 1
  end
  return 0
end
if state == 'R' then
  return 1
end
redis.call('SET', KEYS[1], 'R|' .. token .. '|' .. owner, 'PX', ARGV[3])
local message = token
if KEYS[3] then
  message = release_message(token)
end
return 1 + redis.call('SPUBLISH', ARGV[2], message)
