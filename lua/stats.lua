-- stats.lua: counts one consumer group's messages, in O(log N) per set.
--
-- KEYS[1]    due      zset    the group's due set
-- KEYS[2]    lease    zset    the group's lease set
-- KEYS[3]    paused   string  the group's paused flag
-- KEYS[4..]  dead     zset    sets that hold the group's dead letters: the parked set of its
--                             dead-letter topic, and the due and lease sets of that topic's
--                             groups
--
-- Returns {now µs, due now, scheduled later, in flight, dead letters, earliest due time µs or
-- -1, next due time after now µs or -1, 1 if paused else 0}.

local now = now_us()
local due = redis.call('ZCOUNT', KEYS[1], '-inf', now)
local scheduled = redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
local dead = 0
for i = 4, #KEYS do dead = dead + redis.call('ZCARD', KEYS[i]) end
local next_due = -1
local later = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if later[2] then next_due = tonumber(later[2]) end
return {now, due, scheduled, redis.call('ZCARD', KEYS[2]), dead, head(KEYS[1]) or -1, next_due,
  redis.call('EXISTS', KEYS[3])}
