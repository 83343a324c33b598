-- periodic_pause.lua: pauses a periodic schedule: its pending tick message becomes stale (the
-- next tick is forgotten, see periodic_advance.lua) and so does a buffered tick; resuming arms
-- the next tick after the Redis clock's now (periodic_advance.lua, mode resume).
--
-- fragments: none
-- KEYS[1]          schedule  hash    the schedule's state (see keys.go)
--
-- Returns {1, version, pending tick or ""} when it paused, {0} when it was paused already, {-1}
-- when there is no such schedule.

local h = KEYS[1]
if redis.call('EXISTS', h) == 0 then return {-1} end
if redis.call('HGET', h, 'paused') == '1' then return {0} end
local pending = redis.call('HGET', h, 'next') or ''
redis.call('HSET', h, 'paused', '1')
redis.call('HDEL', h, 'next', 'buffered')
return {1, redis.call('HGET', h, 'ver'), pending}
