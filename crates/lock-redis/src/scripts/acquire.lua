-- Acquire a lock, or report its holder.
--
-- KEYS[1]  the lock key, e.g. lock:{bill-run:2026-11}
-- ARGV[1]  the owner token of this acquisition (unique per acquisition)
-- ARGV[2]  the lease TTL in milliseconds
--
-- The key holds "H|<fencing token>|<owner>" while held — "H|<token>|<owner>|<previous owner>"
-- when the grant replaced a tombstone — and "R|<fencing token>|<owner>" for a short while after
-- a release (a tombstone: it keeps the last fencing token and the releasing owner). Owner tokens
-- never contain "|".
--
-- Returns
--   {1, token}          granted; token is the fencing token of this grant
--   {0, holder, pttl}   held by another owner; pttl is its remaining TTL in ms (-1: none)
--   {2}                 this owner's acquisition was already released (a late duplicate)
--   error "LOCKVALUE …" the key holds something that is not a lock
--
-- Idempotent per owner token: a re-sent copy (the client re-sends in-flight commands after a
-- reconnect) finds its own grant and returns it, or finds its own tombstone and grants nothing.
--
-- Fencing: the token is max(last token + 1, server time in microseconds). While a key or its
-- tombstone exists the tokens count up from it; after both expired, the server clock has moved
-- past every earlier token, as long as it never steps back by more than the tombstone TTL. That
-- also carries the order across a restart without persistence.
local value = redis.call('GET', KEYS[1])
local last = 0
local previous = ''
if value then
  local state, token, owner = string.match(value, '^([HR])|(%d+)|([^|]*)')
  if not state then
    return redis.error_reply('LOCKVALUE the key ' .. KEYS[1] .. ' holds a value that is not a lock')
  end
  if owner == ARGV[1] then
    if state == 'R' then
      return {2}
    end
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, tonumber(token)}
  end
  if state == 'H' then
    return {0, owner, redis.call('PTTL', KEYS[1])}
  end
  last = tonumber(token)
  -- Remembered so that a re-sent release of the previous owner still reports "released".
  previous = '|' .. owner
end
local now = redis.call('TIME')
local token = math.max(last + 1, tonumber(now[1]) * 1000000 + tonumber(now[2]))
redis.call('SET', KEYS[1], 'H|' .. string.format('%.0f', token) .. '|' .. ARGV[1] .. previous, 'PX', ARGV[2])
return {1, token}
