-- (scripts.rs prepends `#!lua flags=allow-oom`: consumers can release, and so let a master
-- finish, when Redis is at maxmemory; a release overwrites a one-byte field.)
-- Release a branch of a master invocation (see pending_ids.lua for the record's fields).
--
-- KEYS[1]  the record
-- ARGV[1]  the branch id
-- ARGV[2]  the record's release channel (same hash tag): the master waits on it
--
-- Returns
--   'released'          it was pending: now released, and the branch id published on ARGV[2]
--   'already_released'  released before (a redelivered message): nothing changed
--   'not_registered'    the record has no such branch: remembered as released, so that a
--                       registration arriving later (one the producer saw fail) counts it as
--                       done; nothing published (the master does not wait for it)
--   'unknown'           no record (the master finished, timed out, crashed and the record
--                       expired, or it never existed): nothing written
--
-- Counted by id: a branch goes from pending to released once, so no release counts for another
-- branch and nothing goes below zero. Idempotent: a re-sent copy finds the field released.
-- Never creates a record.
if not redis.call('HGET', KEYS[1], 'state') then
  return 'unknown'
end
local field = 'b:' .. ARGV[1]
local seen = redis.call('HGET', KEYS[1], field)
if seen == '1' then
  return 'already_released'
end
redis.call('HSET', KEYS[1], field, '1')
if seen == '0' then
  redis.call('SPUBLISH', ARGV[2], ARGV[1])
  return 'released'
end
return 'not_registered'
