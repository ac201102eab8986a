-- (group_commit.rs puts this after a script it wraps, all but its flags line, as `local function
-- call_once(KEYS, ARGV)`: the script runs unchanged, with each call's own KEYS and ARGV.)
-- Group commit: several calls of one script in one script call.
--
-- KEYS     the calls' keys, one call after the other (on a Cluster all in one slot)
-- ARGV[1]  the number of calls; then, per call: its key count, its argument count, its arguments
--
-- Returns one reply per call, in order: {1, the call's reply} or {0, its error message}. An error
-- in one call — raised by redis.call or returned as an error reply — is that call's alone: the
-- calls after it run as they would on their own. (As with any script, what a call wrote before
-- its error stays written.)
local replies = {}
local key_at, arg_at = 1, 2
for i = 1, tonumber(ARGV[1]) do
  local key_count, arg_count = tonumber(ARGV[arg_at]), tonumber(ARGV[arg_at + 1])
  arg_at = arg_at + 2
  local keys, args = {}, {}
  for k = 1, key_count do
    keys[k] = KEYS[key_at + k - 1]
  end
  for a = 1, arg_count do
    args[a] = ARGV[arg_at + a - 1]
  end
  key_at, arg_at = key_at + key_count, arg_at + arg_count
  local ok, reply = pcall(call_once, keys, args)
  if not ok then
    replies[i] = {0, type(reply) == 'table' and reply.err or tostring(reply)}
  elseif type(reply) == 'table' and reply.err then
    replies[i] = {0, reply.err}
  else
    if reply == nil then
      reply = false
    end
    replies[i] = {1, reply}
  end
end
return replies
