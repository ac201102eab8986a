-- Clear a TTL map: delete both its keys (KEYS and grammar as in map_put.lua).
--
-- Returns 1 if it had a live field, else 0.
local live = redis.call('ZCOUNT', KEYS[2], '(' .. now_ms(), '+inf')
redis.call('DEL', KEYS[1], KEYS[2])
if live > 0 then
  return 1
end
return 0
