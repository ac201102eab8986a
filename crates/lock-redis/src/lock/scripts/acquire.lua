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
local lock = read_lock(KEYS[1])
if lock == false then
  return not_a_lock(KEYS[1])
end
local last = 0
local previous = ''
if lock then
  if lock.owner == ARGV[1] then
    if lock.state ~= 'H' then
      return {2}
    end
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, tonumber(lock.token)}
  end
  if lock.state ~= 'R' then
    local ttl = lock_ttl(KEYS[1], lock)
    if not ttl then
      return not_a_lock(KEYS[1])
    end
    return {0, lock.owner, ttl}
  end
  last = tonumber(lock.token)
  -- Remembered so that a re-sent release of the previous owner still reports "released".
  previous = lock.owner
end
return {1, grant(KEYS[1], ARGV[1], ARGV[2], last, previous, tonumber(ARGV[3] or '0'))}
