-- Set a shared value.
--
-- KEYS[1]  the value's key, e.g. lock:values:{catalog:warm-up}
-- ARGV[1]  the value (JSON)
-- ARGV[2]  its TTL in milliseconds, 'keep' (keep the TTL it had) or 'never'
-- ARGV[3]  the condition: 'always', 'absent' or the version the stored value must have
-- ARGV[4]  the channel writes are published on
--
-- Returns {1, version} stored (and `s<version>:<JSON>` published), or {0, current version}
-- refused ({0} when no value is stored).
local current = stored_version(KEYS[1])
if type(current) == 'table' then
  return current
end
if not holds(ARGV[3], current) then
  return refused(current)
end
local next = next_version(KEYS[1], current)
if type(next) == 'table' then
  return next
end
local version = string.format('%d', next)
local stored = version .. ':' .. ARGV[1]
if ARGV[2] == 'keep' then
  redis.call('SET', KEYS[1], stored, 'KEEPTTL')
elseif ARGV[2] == 'never' then
  redis.call('SET', KEYS[1], stored)
else
  redis.call('SET', KEYS[1], stored, 'PX', ARGV[2])
end
redis.call('SPUBLISH', ARGV[4], 's' .. stored)
return {1, version}
