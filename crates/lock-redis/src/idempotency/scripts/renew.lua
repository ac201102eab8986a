-- Extends the owner's in-progress record; never re-creates one.
-- KEYS[1]: the record   ARGV[1]: owner token   ARGV[2]: lease, ms
-- Reply: 1 renewed, 0 not this owner's in-progress record
local record = redis.call('HMGET', KEYS[1], 'o', 'r', 'x')
if record[1] ~= ARGV[1] or record[2] or record[3] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
