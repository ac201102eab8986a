-- Deletes a completed record; an in-progress one is left alone.
-- KEYS[1]: the record   ARGV[1]: the record's change channel
-- Reply: 1 deleted, 0 none completed
if redis.call('HEXISTS', KEYS[1], 'r') == 0 then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('SPUBLISH', ARGV[1], 'forgotten')
return 1
