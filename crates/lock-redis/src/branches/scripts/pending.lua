-- (scripts.rs prepends `#!lua flags=no-writes` and the functions of pending_ids.lua.)
-- Read which branches of a master invocation are pending: the master re-reads after every
-- wake-up of its release channel.
--
-- KEYS[1]  the record
--
-- Returns {<state: 'open' or 'sealed'>, <pending branch id>...}, or {'missing'} when there is
-- no record. Read-only.
local state = redis.call('HGET', KEYS[1], 'state')
if not state then
  return {'missing'}
end
local reply = pending_ids(KEYS[1])
table.insert(reply, 1, state)
return reply
