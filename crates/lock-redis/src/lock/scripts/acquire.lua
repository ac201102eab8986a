-- (scripts.rs prepends the functions of lock_value.lua, which also gives the value grammar.)
-- Acquire a lock, or report its holder.
--
-- KEYS[1]  the lock key, e.g. lock:{bill-run:2026-11}
-- ARGV[1]  the owner token of this acquisition (unique per acquisition)
-- ARGV[2]  the lease TTL in milliseconds
-- ARGV[3]  optional: the minimum hold in milliseconds (0 or absent: none); see release.lua
--
-- Returns
--   {1, token}          granted; token is the fencing token of this grant
--   {0, holder, pttl}   held by another owner (H, or M: released within its minimum hold);
--                       pttl is its remaining TTL in ms (for M, the rest of the hold)
--   {2}                 this owner's acquisition was already released (a late duplicate)
--   error "LOCKVALUE …" the key holds something that is not a lock (including a held value
--                       without a TTL: never made by this library)
--
-- Idempotent per owner token: a re-sent copy (the client re-sends in-flight commands after a
-- reconnect) finds its own grant and returns it, or finds its own tombstone (R) or kept release
-- (M) and grants nothing.
local found, result, previous = find_for_acquire(KEYS[1], ARGV[1], ARGV[2])
if found ~= 'free' then
  return result
end
-- Free: `result` is the last fencing token.
return {1, grant(KEYS[1], ARGV[1], ARGV[2], result, previous, tonumber(ARGV[3] or '0'))}
