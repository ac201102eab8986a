-- (scripts.rs puts this in front of seal.lua and pending.lua.)
-- The record of one master invocation is a hash: field `state` is 'open' or 'sealed', and each
-- branch has a field 'b:<branch id>' holding '0' (registered, pending) or '1' (released).
--
-- pending_ids(key): the ids of the branches of record `key` not yet released, unsorted (the
-- client sorts them: Lua compares strings by the server's locale).
local function pending_ids(key)
  local fields = redis.call('HGETALL', key)
  local pending = {}
  for i = 1, #fields, 2 do
    if fields[i + 1] == '0' and string.sub(fields[i], 1, 2) == 'b:' then
      pending[#pending + 1] = string.sub(fields[i], 3)
    end
  end
  return pending
end
