-- Shared by set.lua and delete.lua: a stored value is `<version>:<JSON>`; a version is the
-- greater of the last one + 1 and the server's clock in microseconds, so it stays above the
-- versions of deleted and expired values too.
local function stored_version(key)
  local stored = redis.call('GET', key)
  if not stored then
    return nil
  end
  local version = tonumber(string.match(stored, '^(%d+):'))
  -- Above 2^53 a version no longer counts exactly (nor formats as one, past 2^63).
  if not version or version >= 9007199254740992 then
    return redis.error_reply('VALUE ' .. key .. ' holds something that is not a shared value')
  end
  return version
end

-- The version a write of `key` stores, or an error reply when it would not count exactly.
local function next_version(key, current)
  local time = redis.call('TIME')
  local version = math.max((current or 0) + 1, tonumber(time[1]) * 1000000 + tonumber(time[2]))
  if version >= 9007199254740992 then
    return redis.error_reply('VALUE ' .. key .. ' is at the last exact version (2^53 - 1): '
      .. 'no write can follow it; DEL the key in Redis to write it again')
  end
  return version
end

-- Whether a write under condition `condition` ('always', 'absent' or a version) may go ahead.
local function holds(condition, current)
  if condition == 'always' then
    return true
  elseif condition == 'absent' then
    return current == nil
  end
  return current ~= nil and current == tonumber(condition)
end

local function refused(current)
  if current == nil then
    return {0}
  end
  return {0, current}
end
