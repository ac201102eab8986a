-- Clear a TTL map: delete both its keys (KEYS and grammar as in map_put.lua).
--
-- Returns 1 if it had a live field, else 0.
local had_live = any_live()
redis.call('DEL', KEYS[1], KEYS[2])
return had_live
