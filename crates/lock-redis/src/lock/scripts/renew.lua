#!lua flags=allow-oom
-- Renew a batch of watchdog leases in one call.
--
-- KEYS[1..n]    lock keys (one Cluster slot per call)
-- ARGV[1]       the TTL to set, in milliseconds
-- ARGV[2..n+1]  the grant expected at each key, in the same order: "H|<fencing token>|<owner>",
--               the start of the value acquire.lua wrote (it may go on with "|<previous owner>")
--
-- Returns the positions (1-based, ascending) of the keys NOT renewed — gone, released, held by
-- someone else, or holding a value without a TTL — and an empty list when every key was renewed
-- (the common case: a short reply, no result table to grow).
--
-- Never creates a key: a lease that is gone stays gone, and its holder is told. A value without
-- a TTL is not a grant this library made (every grant has a TTL), so it is left as it is and
-- reported: PEXPIRE … XX sets a TTL only on a key that has one, which also makes the TTL check
-- free. Idempotent: a re-sent copy only sets the same TTL again. allow-oom: PEXPIRE needs no
-- memory, and leases must not lapse because Redis is at maxmemory.
--
-- Cost: one GET and one PEXPIRE per key. The owner check is a plain prefix search, not
-- lock_value.lua's full parse (which would cost a PTTL and a table per key): the client knows
-- the whole grant, fencing token included, and only the tail after it is matched against the
-- grammar (see docs/performance.md, "Watchdog capacity").
local ttl = ARGV[1]
local lost = {}
for i = 1, #KEYS do
  local key, grant = KEYS[i], ARGV[i + 1]
  -- pcall: one key of the wrong type must not fail the renewal of the whole batch.
  local value = redis.pcall('GET', key)
  -- The grant must be the whole value or be followed by the rest of lock_value.lua's grammar
  -- for H, "|<previous owner>[|<hold until>]" (so owner "a/1" does not match a grant of owner
  -- "a/12", and a value no other script reads as a lock is not renewed either).
  if not (type(value) == 'string'
      and string.find(value, grant, 1, true) == 1
      and (#value == #grant or string.find(value, '^|[^|]*$', #grant + 1)
        or string.find(value, '^|[^|]*|%d*$', #grant + 1))
      and redis.call('PEXPIRE', key, ttl, 'XX') == 1) then
    lost[#lost + 1] = i
  end
end
return lost
