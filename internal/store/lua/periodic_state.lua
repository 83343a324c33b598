-- periodic_state.lua: reads periodic schedules' state hashes with the Redis clock, in one
-- atomic view. It only reads.
--
-- fragments: now_us
-- KEYS[1..]        schedule  hash    a schedule's state (see keys.go), one per schedule
--
-- Returns {now in Unix µs, fields of KEYS[1] as HGETALL returns them, fields of KEYS[2], ...};
-- a schedule that does not exist has no fields.

local reply = {now_us()}
for i = 1, #KEYS do reply[i + 1] = redis.call('HGETALL', KEYS[i]) end
return reply
