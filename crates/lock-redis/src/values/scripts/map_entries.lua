-- Read every live field of a TTL map (KEYS and grammar as in map_put.lua).
--
-- Returns {field, value, field, value, …}.
local fields = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now_ms(), '+inf')
if #fields == 0 then
  return {}
end
local values = redis.call('HMGET', KEYS[1], unpack(fields))
local entries = {}
for i, field in ipairs(fields) do
  if values[i] then
    entries[#entries + 1] = field
    entries[#entries + 1] = values[i]
  end
end
return entries
