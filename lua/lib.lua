-- lib.lua: helpers prepended to every script. It declares no keys of its own.
--
-- All times are Unix microseconds on the Redis clock: exact integers in a Lua double until the
-- year 2255, and fine enough that rounding never makes a message late or early.
--
-- A message of a topic has an internal ID: 12 hex digits, so IDs sort in publish order. In a
-- consumer group it is a member of the due or the lease sorted set, named
--   ID               due, never claimed, stored in the messages hash
--   ID|message       due, never claimed, the only group of its topic: the marshaled message is
--                    part of the member, which saves a hash entry per scheduled message
--   ID:N             due after N attempts, or leased for attempt N
-- so the attempt count travels with the message and ID:N is the lease's fencing token: once a
-- lease expired and another consumer claimed attempt N+1, no command of the old holder matches.
-- A claimed message is always in the messages hash until its group is done with it.

-- now_us is the Redis server clock in Unix microseconds. Scripts never take time from clients.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- split returns the ID, the attempt count and the embedded message (or nil) of a member.
local function split(member)
  local message = nil
  local bar = string.find(member, '|', 1, true)
  if bar ~= nil then
    message = string.sub(member, bar + 1)
    member = string.sub(member, 1, bar - 1)
  end
  local colon = string.find(member, ':', 1, true)
  if colon == nil then return member, 0, message end
  return string.sub(member, 1, colon - 1), tonumber(string.sub(member, colon + 1)), message
end

-- member names a message after `attempts` attempts.
local function member(id, attempts)
  if attempts == 0 then return id end
  return id .. ':' .. attempts
end

-- Lua's unpack takes a few thousand values at most, so variadic commands go in chunks.
local CHUNK = 1000

-- each_chunk calls redis.call(cmd, key, values...) for every CHUNK values (an even number, so
-- score/member pairs stay together) and returns the replies.
local function each_chunk(cmd, key, values)
  local replies = {}
  for i = 1, #values, CHUNK do
    replies[#replies + 1] = redis.call(cmd, key, unpack(values, i, math.min(i + CHUNK - 1, #values)))
  end
  return replies
end

-- hmget returns the values of fields of a hash, false where a field is missing.
local function hmget(key, fields)
  local values = {}
  for _, reply in ipairs(each_chunk('HMGET', key, fields)) do
    for _, v in ipairs(reply) do values[#values + 1] = v end
  end
  return values
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

-- held returns which of the given lease members are still leased: a table member -> true.
local function held(lease, members)
  local leased = {}
  if #members == 0 then return leased end
  local scores = {}
  for _, reply in ipairs(each_chunk('ZMSCORE', lease, members)) do
    for _, s in ipairs(reply) do scores[#scores + 1] = s end
  end
  for i, m in ipairs(members) do
    if scores[i] then leased[m] = true end
  end
  return leased
end

-- drop ends one group's interest in the messages with the given IDs: each stored message is
-- deleted once no other group holds it (refs counts the groups while more than one does).
local function drop(messages, refs, ids)
  if #ids == 0 then return end
  local free = ids
  if redis.call('EXISTS', refs) == 1 then
    free = {}
    local counts = hmget(refs, ids)
    for i, id in ipairs(ids) do
      if not counts[i] then
        free[#free + 1] = id
      elseif redis.call('HINCRBY', refs, id, -1) <= 0 then
        redis.call('HDEL', refs, id)
        free[#free + 1] = id
      end
    end
  end
  if #free > 0 then each_chunk('HDEL', messages, free) end
end

-- ack removes the given lease members and drops their messages. It returns the IDs whose lease
-- had been lost, which are left alone.
local function ack(lease, messages, refs, members)
  local leased = held(lease, members)
  local done, ids, refused = {}, {}, {}
  for _, m in ipairs(members) do
    local id = split(m)
    if leased[m] then
      done[#done + 1] = m
      ids[#ids + 1] = id
    else
      refused[#refused + 1] = id
    end
  end
  if #done > 0 then each_chunk('ZREM', lease, done) end
  drop(messages, refs, ids)
  return refused
end

-- publish_to stores messages once and schedules each for every consumer group registered on a
-- topic: in the messages hash, or, with one group, in the due member itself. The topic's keys
-- start at KEYS[k]: call (string, this publish call's token), seq (string), messages (hash),
-- refs (hash), groups (set), parked (sorted set), then one due sorted set per group. Its
-- arguments start at ARGV[a]: how long the call's token is kept (ms), G, G group names, their G
-- wake channels, then pairs of marshaled message and schedule (a delay in µs after now, or "@"
-- and a Unix time in µs, due at once if past).
--
-- With G = 0, no group is registered yet: the messages wait in the parked set, in the
-- single-group form, until the first group registers and takes the set over (register.lua).
--
-- The call key makes a second run of the same call (a client retry after a lost reply) store
-- nothing more: it holds the first ID stored by the first run.
--
-- Returns {1, first ID}, or {0, group...} when the caller's view of the groups is stale; nothing
-- is written then, and the caller retries with the listed groups.
local function publish_to(k, a)
  local call, seq, messages, refs, groups, parked =
    KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], KEYS[k + 5]
  local ttl, ngroups = ARGV[a], tonumber(ARGV[a + 1])
  local done = redis.call('GET', call)
  if done then return {1, done} end
  if redis.call('SCARD', groups) ~= ngroups then
    local current = redis.call('SMEMBERS', groups)
    table.insert(current, 1, 0)
    return current
  end

  local first = a + 2 + 2 * ngroups
  local count = (#ARGV - first + 1) / 2
  local now = now_us()
  local scores, min_score = {}, nil
  for i = 0, count - 1 do
    local schedule = ARGV[first + 2 * i + 1]
    local score
    if string.sub(schedule, 1, 1) == '@' then
      score = math.max(tonumber(string.sub(schedule, 2)), now)
    else
      score = now + math.max(tonumber(schedule), 0)
    end
    if min_score == nil or score < min_score then min_score = score end
    scores[#scores + 1] = score
  end

  local last_id = redis.call('INCRBY', seq, count)
  local first_id = string.format('%012x', last_id - count + 1)
  local embedded = ngroups <= 1
  local stored, scheduled, counted = {}, {}, {}
  for i = 0, count - 1 do
    local id = string.format('%012x', last_id - count + 1 + i)
    scheduled[#scheduled + 1] = scores[i + 1]
    if embedded then
      scheduled[#scheduled + 1] = id .. '|' .. ARGV[first + 2 * i]
    else
      scheduled[#scheduled + 1] = id
      stored[#stored + 1] = id
      stored[#stored + 1] = ARGV[first + 2 * i]
      counted[#counted + 1] = id
      counted[#counted + 1] = ngroups
    end
  end
  if not embedded then
    each_chunk('HSET', messages, stored)
    each_chunk('HSET', refs, counted)
  end
  if ngroups == 0 then
    each_chunk('ZADD', parked, scheduled)
  end
  for g = 1, ngroups do
    local due = KEYS[k + 5 + g]
    local before = head(due)
    each_chunk('ZADD', due, scheduled)
    wake(ARGV[a + 1 + ngroups + g], before, min_score)
  end
  redis.call('SET', call, first_id, 'PX', ttl)
  return {1, first_id}
end
