#!lua flags=no-writes,allow-stale
-- Read a lock's state in one atomic step, for operators (status and list; never written).
--
-- KEYS[1]  the lock key
-- KEYS[2]  the key's queue of fair waiters
--
-- Returns {<lock value, or false when there is no key>, <PTTL of the lock key in ms (-2: no
-- key)>, <number of queued fair waiters>}.
-- Read-only, so trivially idempotent.
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('ZCARD', KEYS[2])}
