-- Read every live field of a TTL map (KEYS and grammar as in map_put.lua).
--
-- Returns {field, value, field, value, …}.
local fields = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now_ms(), '+inf')
if #fields == 0 then
  check_hash()
  return {}
end
local entries = {}
-- In slices: unpack stops at about 8,000 values.
for first = 1, #fields, 1000 do
  local slice = { unpack(fields, first, math.min(first + 999, #fields)) }
  local values = redis.call('HMGET', KEYS[1], unpack(slice))
  for i, field in ipairs(slice) do
    if values[i] then
      entries[#entries + 1] = field
      entries[#entries + 1] = values[i]
    end
  end
end
return entries
