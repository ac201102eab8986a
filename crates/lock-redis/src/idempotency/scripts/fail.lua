-- Marks the owner's in-progress record failed and wakes the waiting duplicates: a claim that
-- waited on this owner is answered with the failure, any other claim takes the record over.
-- KEYS[1]: the record   ARGV[1]: owner token   ARGV[2]: how long the mark stays, ms
-- ARGV[3]: the record's change channel (same hash tag)
-- Reply: 1 marked (or already marked: a re-sent call publishes nothing), 0 not this owner's
-- in-progress record
local record = redis.call('HMGET', KEYS[1], 'o', 'r', 'x')
if record[1] ~= ARGV[1] or record[2] then
  return 0
end
if not record[3] then
  redis.call('HSET', KEYS[1], 'x', '1')
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('SPUBLISH', ARGV[3], 'failed')
end
return 1
