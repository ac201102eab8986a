-- Stores the result in the owner's in-progress record and wakes the waiting duplicates.
-- KEYS[1]: the record   ARGV[1]: owner token   ARGV[2]: result   ARGV[3]: result TTL, ms
-- ARGV[4]: the record's change channel (same hash tag)
-- Reply: 1 stored (or already stored by this owner: a re-sent completion), 0 not this
-- owner's record (its lease ended; maybe another owner's now)
local record = redis.call('HMGET', KEYS[1], 'o', 'r', 'x')
if record[1] ~= ARGV[1] or record[3] then
  return 0
end
if record[2] then
  return 1
end
redis.call('HSET', KEYS[1], 'r', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('SPUBLISH', ARGV[4], 'completed')
return 1
