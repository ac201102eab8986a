-- Claims an idempotency record, or reports what is there.
-- KEYS[1]: the record, a hash: o = owner token, f = request fingerprint, r = result (once
--          completed), x = failed (set by its owner's fail script)
-- ARGV[1]: owner token   ARGV[2]: fingerprint ('' for none)   ARGV[3]: lease, ms
-- ARGV[4]: the owner this caller waited on ('' for none)
-- Replies: {0} owned (created now, taken over from a failed owner, or already this owner's: a
--              re-sent claim)
--          {1, fingerprint, result} completed
--          {2, owner, fingerprint, pttl ms} in progress under another owner
--          {3, owner} failed by the owner this caller waited on
local record = redis.call('HMGET', KEYS[1], 'o', 'f', 'r', 'x')
if record[4] then
  if record[1] == ARGV[4] then
    return {3, record[1]}
  end
  redis.call('DEL', KEYS[1])
  record[1] = false
end
if not record[1] then
  redis.call('HSET', KEYS[1], 'o', ARGV[1], 'f', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {0}
end
if record[3] then
  return {1, record[2], record[3]}
end
if record[1] == ARGV[1] then
  return {0}
end
return {2, record[1], record[2], redis.call('PTTL', KEYS[1])}
