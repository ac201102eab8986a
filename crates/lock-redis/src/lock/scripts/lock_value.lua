-- The lock value: its grammar, parsed and written only here. scripts.rs puts this file in front
-- of every script that reads or writes a lock key, so they all read a value the same way.
--
--   <state>|<fencing token>|<owner>[|<previous owner>[|<hold until>]]
--
--   state           H  held by <owner>
--                   M  released by <owner> before its minimum hold ended: still held by it,
--                      never renewed, until <hold until>; after that, until the key expires
--                      (one tombstone TTL later), it reads as a tombstone (R) of <owner>
--                   R  released: a tombstone that keeps the fencing token (and the releasing
--                      owner) counting up for a short while; exactly three fields
--   fencing token   decimal, no leading zero, below 2^53 (Lua numbers are doubles: a larger one
--                   would not count up exactly)
--   owner           an owner token: never empty, never contains "|"
--   previous owner  H and M: the owner of the tombstone the grant replaced (may be empty)
--   hold until      H and M: the server time (ms) until which a release keeps the key held
--                   (the minimum hold); absent or empty: none
--
-- The library gives every lock value a TTL. A value that does not parse was not made by this
-- library: it is "not a lock", and no script reads it as held or free. Nor is a held value (H or
-- M) without a TTL: it would be held for ever. A script that finds its own owner token, or a
-- tombstone, does not read the TTL: its next write sets one.

-- The server's time as {seconds, microseconds}, in microseconds, and in milliseconds.
local function server_clock()
  local clock = redis.call('TIME')
  local us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
  return us, math.floor(us / 1000)
end

-- The lock `value`, as {state, token, owner, previous, hold_until, value}, or false when it is
-- not a lock (see above). An M whose hold has ended is returned as R; one still held also has
-- `hold_rest`, the rest of the hold in ms.
local function parse_lock(value)
  local fields = {}
  for field in string.gmatch(value .. '|', '([^|]*)|') do
    fields[#fields + 1] = field
  end
  local lock = {
    state = fields[1],
    token = fields[2],
    owner = fields[3],
    previous = fields[4] or '',
    hold_until = fields[5] or '',
    value = value,
  }
  local fields_allowed = 5
  if lock.state == 'R' then
    fields_allowed = 3
  elseif lock.state ~= 'H' and lock.state ~= 'M' then
    return false
  end
  if #fields < 3 or #fields > fields_allowed or not string.match(lock.token, '^[1-9]%d*$')
      or #lock.token > 16 or (#lock.token == 16 and lock.token > '9007199254740991')
      or lock.owner == '' or not string.match(lock.hold_until, '^%d*$') then
    return false
  end
  if lock.state == 'M' then
    local hold_until = tonumber(lock.hold_until)
    if not hold_until then
      return false
    end
    local _, now_ms = server_clock()
    if hold_until > now_ms then
      lock.hold_rest = hold_until - now_ms
    else
      lock.state = 'R'
    end
  end
  return lock
end

-- The lock at `key`: nil when there is no key, false when it holds something that is not a lock
-- (GET itself fails with WRONGTYPE on a key that is not a string). The TTL is not read.
local function read_lock(key)
  local value = redis.call('GET', key)
  if not value then
    return nil
  end
  return parse_lock(value)
end

-- How long `lock`, read at `key`, stays in its state, in ms (the key's PTTL; for M, the rest of
-- the hold), or false when the key has no TTL: then it is not a lock (see above).
local function lock_ttl(key, lock)
  local ttl = redis.call('PTTL', key)
  if ttl < 0 then
    return false
  end
  return lock.hold_rest or ttl
end

-- The lock at `key` with its `ttl` (see lock_ttl), as read_lock returns it otherwise.
local function read_lock_and_ttl(key)
  local lock = read_lock(key)
  if lock then
    lock.ttl = lock_ttl(key, lock)
    if not lock.ttl then
      return false
    end
  end
  return lock
end

-- The error reply for a key that holds something that is not a lock.
local function not_a_lock(key)
  return redis.error_reply('LOCKVALUE the key ' .. key .. ' holds a value that is not a lock')
end

-- What an acquisition by `owner` with a lease of `lease_ms` finds at `key`, before any rule of
-- a fair queue:
--   'own', {1, token} or {2}     this owner's grant (its lease renewed now), or its release
--   'held', {0, holder, ttl}     another owner holds the key (H, or M within its hold)
--   'free', last, previous       a grant comes next, with these arguments of grant()
--   'error', reply               the key holds something that is not a lock
-- Idempotent per owner token: a re-sent acquisition finds its own grant or release.
local function find_for_acquire(key, owner, lease_ms)
  local lock = read_lock(key)
  if lock == false then
    return 'error', not_a_lock(key)
  end
  if not lock then
    return 'free', 0, ''
  end
  if lock.owner == owner then
    if lock.state ~= 'H' then
      return 'own', {2}
    end
    redis.call('PEXPIRE', key, lease_ms)
    return 'own', {1, tonumber(lock.token)}
  end
  if lock.state ~= 'R' then
    local ttl = lock_ttl(key, lock)
    if not ttl then
      return 'error', not_a_lock(key)
    end
    return 'held', {0, lock.owner, ttl}
  end
  -- The tombstone's owner is remembered so that its re-sent release still reports "released".
  return 'free', tonumber(lock.token), lock.owner
end

-- Grants `key` to `owner` for `ttl_ms` and returns the fencing token: max(`last` + 1, server
-- time in microseconds). While a key or its tombstone exists the tokens count up from it; after
-- both expired (a lease that lapsed, a minimum hold that ended), the server clock has moved past
-- every earlier token, as long as it never steps back by more than the tombstone TTL. That also
-- carries the order across a restart without persistence. The clock is read even when there is a
-- last token: after a failover to a replica that has an older copy of the key (a grant made since
-- was lost with the old primary), `last` + 1 alone would repeat the lost grant's token, while the
-- clock has moved past it (fencing.rs tests it).
-- `previous`: the owner of the tombstone this grant replaces ('' for none). `hold_ms` > 0: a
-- release sooner than that after now keeps the key held until then.
local function grant(key, owner, ttl_ms, last, previous, hold_ms)
  local now_us, now_ms = server_clock()
  local token = math.max(last + 1, now_us)
  local value = 'H|' .. string.format('%.0f', token) .. '|' .. owner
  if hold_ms > 0 then
    value = value .. '|' .. previous .. '|' .. string.format('%.0f', now_ms + hold_ms)
  elseif previous ~= '' then
    value = value .. '|' .. previous
  end
  redis.call('SET', key, value, 'PX', ttl_ms)
  return token
end
