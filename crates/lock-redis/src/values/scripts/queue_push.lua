-- Push items to a queue: a stream read through the consumer group `consumers`.
--
-- KEYS[1]  the queue's stream, e.g. lock:queues:{tariff-changes}
-- ARGV[1]  the most items the queue may hold
-- ARGV[2]  the queue's TTL after this push, in milliseconds
-- ARGV[3…] the items (JSON)
--
-- Returns {1, id, id, …} appended, or {0, len} refused whole (the bound would be passed).
local len = redis.call('XLEN', KEYS[1])
if len + #ARGV - 2 > tonumber(ARGV[1]) then
  return {0, len}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('XGROUP', 'CREATE', KEYS[1], 'consumers', '0', 'MKSTREAM')
end
local reply = {1}
for i = 3, #ARGV do
  reply[#reply + 1] = redis.call('XADD', KEYS[1], '*', 'i', ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return reply
