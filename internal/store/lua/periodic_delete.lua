-- periodic_delete.lua: deletes a periodic schedule: its state hash and its name in the index.
-- Its pending tick message, if any, is stale from then on (see periodic_advance.lua); the
-- caller cancels it by key.
--
-- fragments: none
-- KEYS[1]          schedule  hash    the schedule's state (see keys.go)
-- KEYS[2]          index     zset    every schedule's name
-- ARGV[1]          the schedule's name
--
-- Returns {1, version, pending tick or ""} when it deleted the schedule, {0} when there was none.

local h = KEYS[1]
if redis.call('EXISTS', h) == 0 then
  redis.call('ZREM', KEYS[2], ARGV[1])
  return {0}
end
local ver, pending = redis.call('HGET', h, 'ver') or '', redis.call('HGET', h, 'next') or ''
redis.call('DEL', h)
redis.call('ZREM', KEYS[2], ARGV[1])
return {1, ver, pending}
