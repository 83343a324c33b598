-- stats.lua: counts the messages of consumer groups of one topic partition, in O(log N) per
-- set.
--
-- fragments: int, now_us, head
-- KEYS[1]         due     zset    the first group's due set
-- KEYS[2]         lease   zset    its lease set
-- KEYS[3]         paused  string  its paused flag
-- KEYS[4]         dead    zset    the parked set of its dead-letter topic (dead letters no
--                                 consumer group has taken yet)
-- KEYS[5]         far     zset    its compact tier's index (see far in lib): far .. ':n' counts
--                                 the tier's messages
-- KEYS[6..]       the same five keys for each further group: KEYS[5g-4..5g] for group g
--
-- Returns, per group, {due now, scheduled later, in flight, dead letters, earliest due time µs
-- or -1, next due time after now µs or -1, 1 if paused else 0, of the scheduled later those in
-- the compact tier}, after the Redis time {now µs}. The compact tier's messages count as
-- scheduled later; its earliest bucket's start stands for their next due time (they are due
-- at or after it).

local now = now_us()
local result = {now}
for g = 1, #KEYS, 5 do
  local due_set, far = KEYS[g], KEYS[g + 4]
  local later = redis.call('ZRANGEBYSCORE', due_set, '(' .. int(now), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  local next_due = -1
  if later[2] then next_due = tonumber(later[2]) end
  local bucket = redis.call('ZRANGE', far, 0, 0)[1]
  local start = bucket and tonumber(string.match(bucket, ':(%d+)$'))
  if start and (next_due == -1 or start < next_due) then next_due = math.max(start, now + 1) end
  local in_far = tonumber(redis.call('GET', far .. ':n') or 0)
  local values = {
    redis.call('ZCOUNT', due_set, '-inf', now),
    redis.call('ZCOUNT', due_set, '(' .. int(now), '+inf') + in_far,
    redis.call('ZCOUNT', KEYS[g + 1], '-inf', '(1e300'), -- not the lease set's marker
    redis.call('ZCARD', KEYS[g + 3]),
    head(due_set) or -1,
    next_due,
    redis.call('EXISTS', KEYS[g + 2]),
    in_far,
  }
  for _, v in ipairs(values) do result[#result + 1] = v end
end
return result
