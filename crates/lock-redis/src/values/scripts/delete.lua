-- Delete a shared value.
--
-- KEYS[1]  the value's key
-- ARGV[1]  the condition: 'always' or the version the stored value must have
-- ARGV[2]  the channel writes are published on
--
-- Returns {1, version} deleted (and `d<version>` published), or {0, current version} refused
-- ({0} when no value is stored).
local current = stored_version(KEYS[1])
if type(current) == 'table' then
  return current
end
if current == nil or not holds(ARGV[1], current) then
  return refused(current)
end
local next = next_version(KEYS[1], current)
if type(next) == 'table' then
  return next
end
local version = string.format('%d', next)
redis.call('DEL', KEYS[1])
redis.call('SPUBLISH', ARGV[2], 'd' .. version)
return {1, version}
