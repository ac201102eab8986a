-- (scripts.rs prepends `#!lua flags=allow-oom` — a master can finish at maxmemory — and the
-- functions of pending_ids.lua.)
-- Seal a master invocation when its block returns: no new branch registers from now on.
--
-- KEYS[1]  the record
-- ARGV[1]  the record's TTL in milliseconds: lengthened to at least this (GT), so it outlives
--          the master's wait
--
-- Returns {'sealed', <pending branch id>...}, or {'missing'} when there is no record (nothing
-- written).
--
-- Idempotent: a re-sent copy seals a sealed record and reads the same pending set.
if not redis.call('HGET', KEYS[1], 'state') then
  return {'missing'}
end
redis.call('HSET', KEYS[1], 'state', 'sealed')
redis.call('PEXPIRE', KEYS[1], ARGV[1], 'GT')
local reply = pending_ids(KEYS[1])
table.insert(reply, 1, 'sealed')
return reply
