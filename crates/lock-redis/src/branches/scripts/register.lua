-- Register a branch of a master invocation (see pending_ids.lua for the record's fields).
--
-- KEYS[1]  the record
-- ARGV[1]  the branch id
-- ARGV[2]  the record's TTL in milliseconds: lengthened to at least this (GT)
--
-- Returns
--   'registered'          registered now: pending until released
--   'already_registered'  registered before: counted once
--   'already_released'    its release arrived first (see release.lua): counted as released
--   'sealed'              new id, but the master block has returned: not registered
--   'unknown'             no record (never opened, closed, or expired): nothing written
--
-- Idempotent per branch id: a re-sent copy finds its own field and changes nothing but the TTL.
-- Never creates a record.
local state = redis.call('HGET', KEYS[1], 'state')
if not state then
  return 'unknown'
end
local field = 'b:' .. ARGV[1]
local seen = redis.call('HGET', KEYS[1], field)
local outcome
if seen == '0' then
  outcome = 'already_registered'
elseif seen == '1' then
  outcome = 'already_released'
elseif state == 'sealed' then
  return 'sealed'
else
  redis.call('HSET', KEYS[1], field, '0')
  outcome = 'registered'
end
redis.call('PEXPIRE', KEYS[1], ARGV[2], 'GT')
return outcome
