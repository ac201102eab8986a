-- Deletes the owner's in-progress record and wakes the waiting duplicates.
-- KEYS[1]: the record   ARGV[1]: owner token   ARGV[2]: the record's change channel
-- Reply: 1 deleted, 0 not this owner's in-progress record
local record = redis.call('HMGET', KEYS[1], 'o', 'r', 'x')
if record[1] ~= ARGV[1] or record[2] or record[3] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('SPUBLISH', ARGV[2], 'abandoned')
return 1
