-- Open the record of a master invocation (see pending_ids.lua for its fields).
--
-- KEYS[1]  the record, e.g. lock:branches:{ticket:4711}:42 (42: the invocation id, the fencing
--          token of the master's lock grant)
-- ARGV[1]  its TTL in milliseconds (at least the master's lease)
--
-- Returns 1 if it created the record, 0 if it existed.
--
-- Idempotent: a re-sent copy (the client re-sends in-flight commands after a reconnect) finds
-- the record and only lengthens its TTL (GT: never shortens it). The TTL runs on the server's
-- clock.
if redis.call('HGET', KEYS[1], 'state') then
  redis.call('PEXPIRE', KEYS[1], ARGV[1], 'GT')
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'open')
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
