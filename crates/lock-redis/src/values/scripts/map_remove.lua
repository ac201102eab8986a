-- Remove a field of a TTL map (KEYS and grammar as in map_put.lua); both keys then expire
-- with the last field left.
--
-- ARGV[1]  the field
--
-- Returns 1 if it held a live value, else 0.
local was_live = remove_entry(ARGV[1])
expire_keys('+inf', 0)
return was_live
