-- stats.lua: counts the messages of consumer groups of one topic partition, in O(log N) per
-- set.
--
-- fragments: now_us, head
-- KEYS[1]         due     zset    the first group's due set
-- KEYS[2]         lease   zset    its lease set
-- KEYS[3]         paused  string  its paused flag
-- KEYS[4]         dead    zset    the parked set of its dead-letter topic (dead letters no
--                                 consumer group has taken yet)
-- KEYS[5..]       the same four keys for each further group: KEYS[4g-3..4g] for group g
--
-- Returns, per group, {due now, scheduled later, in flight, dead letters, earliest due time µs
-- or -1, next due time after now µs or -1, 1 if paused else 0}, after the Redis time {now µs}.

local now = now_us()
local result = {now}
for g = 1, #KEYS, 4 do
  local due_set = KEYS[g]
  local later = redis.call('ZRANGEBYSCORE', due_set, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  local next_due = -1
  if later[2] then next_due = tonumber(later[2]) end
  local values = {
    redis.call('ZCOUNT', due_set, '-inf', now),
    redis.call('ZCOUNT', due_set, '(' .. now, '+inf'),
    redis.call('ZCOUNT', KEYS[g + 1], '-inf', '(1e300'), -- not the lease set's marker
    redis.call('ZCARD', KEYS[g + 3]),
    head(due_set) or -1,
    next_due,
    redis.call('EXISTS', KEYS[g + 2]),
  }
  for _, v in ipairs(values) do result[#result + 1] = v end
end
return result
