-- Remove a field of a TTL map (KEYS and grammar as in map_put.lua).
--
-- ARGV[1]  the field
--
-- Returns 1 if it held a live value, else 0.
return remove_entry(ARGV[1])
