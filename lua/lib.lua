-- lib.lua: helpers prepended to every script. It declares no keys of its own.

-- now_us is the Redis server clock in Unix microseconds. Scripts never take time from clients.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- head returns the lowest score of a sorted set, or nil when it is empty.
local function head(zset)
  local h = redis.call('ZRANGE', zset, 0, 0, 'WITHSCORES')
  if h[2] then return tonumber(h[2]) end
  return nil
end

-- wake tells the subscribers of a group that a message is due at `score` when that is earlier
-- than the group's earliest due time before the change (`before`, nil for an empty set).
local function wake(channel, before, score)
  if before == nil or score < before then
    redis.call('PUBLISH', channel, string.format('%d', score))
  end
end

-- holds reports whether the claim (id, attempt) still owns its lease. The attempt number is
-- the fencing token: once a lease expires and another consumer claims the message, the
-- attempt number moves on and the old holder's ack, nack or extension is refused.
local function holds(lease, attempts, id, attempt)
  return redis.call('HGET', attempts, id) == attempt and redis.call('ZSCORE', lease, id) ~= false
end

-- finish ends a group's interest in a message: its lease and attempt count go, and the stored
-- message goes too once no other group holds it.
local function finish(lease, attempts, messages, refs, id)
  redis.call('ZREM', lease, id)
  redis.call('HDEL', attempts, id)
  if redis.call('HEXISTS', refs, id) == 1 then
    if redis.call('HINCRBY', refs, id, -1) > 0 then return end
    redis.call('HDEL', refs, id)
  end
  redis.call('HDEL', messages, id)
end

-- All times are Unix microseconds on the Redis clock: exact integers in a Lua double until the
-- year 2255, and fine enough that rounding never makes a message late or early.

-- publish_to stores messages once and schedules each for every consumer group registered on a
-- topic. The topic's keys start at KEYS[k]: seq (string), messages (hash), refs (hash), groups
-- (set), then one due sorted set per group. Its arguments start at ARGV[a]: the number of groups
-- the caller believes are registered, G, G group names, their G wake channels, then pairs of
-- marshaled message and schedule (a delay in µs after now, or "@" and a Unix time in µs, due at
-- once if past).
--
-- When no group is registered, the caller passes the default group as its only group and
-- expects 0; it gets registered, so the messages wait for it instead of being dropped. Groups
-- are never unregistered, so the count identifies the set.
--
-- Returns {1, first ID}, or {0, group...} when the caller's view of the groups is stale; nothing
-- is written then, and the caller retries with the listed groups.
local function publish_to(k, a)
  local seq, messages, refs, groups = KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3]
  local expected, ngroups = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  local registered = redis.call('SCARD', groups)
  if registered == 0 and expected == 0 and ngroups == 1 then
    redis.call('SADD', groups, ARGV[a + 2])
  elseif registered ~= expected or registered ~= ngroups then
    local current = redis.call('SMEMBERS', groups)
    table.insert(current, 1, 0)
    return current
  end

  local first = a + 2 + 2 * ngroups
  local count = (#ARGV - first + 1) / 2
  local last_id = redis.call('INCRBY', seq, count)
  local now = now_us()

  local before = {}
  for g = 1, ngroups do before[g] = head(KEYS[k + 3 + g]) end
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
    redis.call('HSET', messages, id, ARGV[first + 2 * i])
    if ngroups > 1 then redis.call('HSET', refs, id, ngroups) end
    for g = 1, ngroups do
      redis.call('ZADD', KEYS[k + 3 + g], score, id)
    end
  end
  for g = 1, ngroups do
    wake(ARGV[a + 1 + ngroups + g], before[g], min_score)
  end
  return {1, string.format('%012x', last_id - count + 1)}
end
