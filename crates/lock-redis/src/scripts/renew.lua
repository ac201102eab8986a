#!lua flags=allow-oom
-- Renew a batch of watchdog leases in one call.
--
-- KEYS[1..n]    lock keys (one Cluster slot per call)
-- ARGV[1]       the TTL to set, in milliseconds
-- ARGV[2..n+1]  the owner token expected at each key, in the same order
--
-- Returns a list of n integers: 1 if the key was still held by that owner (its TTL is now
-- ARGV[1]), 0 if it was gone, released or held by someone else.
--
-- Never creates a key: a lease that is gone stays gone, and its holder is told. Idempotent: a
-- re-sent copy only sets the same TTL again. allow-oom: PEXPIRE needs no memory, and leases must
-- not lapse because Redis is at maxmemory.
local result = {}
for i, key in ipairs(KEYS) do
  local renewed = 0
  -- pcall: one key of the wrong type must not fail the renewal of the whole batch.
  local value = redis.pcall('GET', key)
  if type(value) == 'string' then
    local state, _, owner = string.match(value, '^([HR])|(%d+)|([^|]*)')
    if state == 'H' and owner == ARGV[i + 1] then
      redis.call('PEXPIRE', key, ARGV[1])
      renewed = 1
    end
  end
  result[i] = renewed
end
return result
