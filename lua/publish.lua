-- publish.lua: stores a batch of messages and schedules each for every registered consumer
-- group, atomically: all of the batch is stored, or none of it.
--
-- KEYS[1]        seq       string  internal ID counter of the topic
-- KEYS[2]        messages  hash    ID -> marshaled message
-- KEYS[3]        refs      hash    ID -> number of groups still holding it (written when > 1)
-- KEYS[4]        groups    set     registered consumer groups
-- KEYS[5..4+G]   due       zset    ID -> due time (µs), one per group in ARGV[3..2+G]
-- ARGV[1]        number of groups the caller believes are registered
-- ARGV[2]        G, the number of groups passed
-- ARGV[3..2+G]   group names
-- ARGV[3+G..2+2G] wake channels of those groups, same order
-- ARGV[3+2G..]   pairs: marshaled message, schedule: a delay in µs after the Redis clock now,
--                or "@" and an absolute due time in Unix µs (due at once if already past)
--
-- When no group is registered, the caller passes the default group as its only group and
-- expects 0; the script registers it, so the messages wait for it instead of being dropped.
-- Groups are never unregistered, so the count identifies the set.
--
-- Returns {1, first ID} on success, or {0, group...} when the caller's view of the registered
-- groups is stale; nothing is written then, and the caller retries with the listed groups.

local expected = tonumber(ARGV[1])
local ngroups = tonumber(ARGV[2])
local registered = redis.call('SCARD', KEYS[4])
if registered == 0 and expected == 0 and ngroups == 1 then
  redis.call('SADD', KEYS[4], ARGV[3])
elseif registered ~= expected or registered ~= ngroups then
  local groups = redis.call('SMEMBERS', KEYS[4])
  table.insert(groups, 1, 0)
  return groups
end

local first = 3 + 2 * ngroups
local count = (#ARGV - first + 1) / 2
local last_id = redis.call('INCRBY', KEYS[1], count)
local now = now_us()

local before = {}
for g = 1, ngroups do before[g] = head(KEYS[4 + g]) end
local min_score = nil

for i = 0, count - 1 do
  local id = string.format('%012x', last_id - count + 1 + i)
  local schedule = ARGV[first + 2 * i + 1]
  local score
  if string.sub(schedule, 1, 1) == '@' then
    score = math.max(tonumber(string.sub(schedule, 2)), now)
  else
    score = now + math.max(tonumber(schedule), 0)
  end
  if min_score == nil or score < min_score then min_score = score end
  redis.call('HSET', KEYS[2], id, ARGV[first + 2 * i])
  if ngroups > 1 then redis.call('HSET', KEYS[3], id, ngroups) end
  for g = 1, ngroups do
    redis.call('ZADD', KEYS[4 + g], score, id)
  end
end

for g = 1, ngroups do
  wake(ARGV[2 + ngroups + g], before[g], min_score)
end
return {1, string.format('%012x', last_id - count + 1)}
