-- requeue.lua: moves dead letters back to the consumer group they came from, due at once: each
-- is removed from its dead-letter set (and its stored copy dropped, see drop) and stored anew on
-- the source topic under a new ID that only that group holds. Requeued messages have no key: a
-- keyed dead letter (one published with a key to the dead-letter topic, as a poison-queue
-- forward does) frees its key on the dead-letter topic, whose history key, if the key keeps one,
-- then expires after its retention. The dead-letter topic shares the source topic's hash slot
-- (DefaultDeadLetterTopic).
--
-- Every key it touches is in KEYS, and it reads all of them before its first write (Redis does
-- not roll back a script that fails halfway): a failure, such as a key of the wrong type,
-- leaves the dead letters where they were.
--
-- fragments: now_us, next_ids, split, each_chunk, hmget, stored, schedule
-- KEYS[1]   dead      zset    the dead-letter topic's parked set
-- KEYS[2]   dmessages hash    the dead-letter topic's messages
-- KEYS[3]   drefs     hash    the dead-letter topic's refs
-- KEYS[4]   seq       string  the source topic's ID counter
-- KEYS[5]   messages  hash    the source topic's messages
-- KEYS[6]   due       zset    the source group's due set
-- KEYS[7]   groups    set     the source topic's registered consumer groups
-- KEYS[8..] history   hash    the dead-letter topic's history key of each keyed member below
-- ARGV[1]   the source group's name
-- ARGV[2]   the source group's wake channel
-- ARGV[3]   the dead-letter topic's history prefix: KEYS[n] of a member with key K must be it
--           followed by K
-- ARGV[4..] pairs: a member of the dead-letter set to requeue, and the index in KEYS of its
--           history key (0 for a member without a key)
--
-- Returns the number requeued, members no longer in the set skipped, or -1 when the group is
-- not registered (nothing changed). A keyed member without its own history key in KEYS is an
-- error, before any write.

if redis.call('SISMEMBER', KEYS[7], ARGV[1]) == 0 then return -1 end
local members, history_at, seen = {}, {}, {}
for i = 4, #ARGV - 1, 2 do
  local m = ARGV[i]
  if not seen[m] then
    seen[m] = true
    members[#members + 1] = m
    history_at[#members] = tonumber(ARGV[i + 1])
  end
end
if #members == 0 then return 0 end

-- Reads.
local present = {}
for _, reply in ipairs(each_chunk('ZMSCORE', KEYS[1], members)) do
  for _, s in ipairs(reply) do present[#present + 1] = s end
end
local found, ids, embedded, histories = {}, {}, {}, {}
for i, m in ipairs(members) do
  if present[i] then
    local id, _, message = split(m)
    local key, h = key_of(id), false
    if key then
      h = KEYS[history_at[i]]
      if history_at[i] < 8 or h ~= ARGV[3] .. key then
        return redis.error_reply('ERR requeue: the dead letter ' .. m .. ' has no history key of its own in KEYS')
      end
    end
    found[#found + 1] = m
    ids[#ids + 1] = id
    embedded[#embedded + 1] = message or false
    histories[#histories + 1] = h
  end
end
if #found == 0 then return 0 end
local data = stored(KEYS[2], ids)
local fields = {}
for i, id in ipairs(ids) do fields[i] = field(id) end
local counts = {}
if redis.call('EXISTS', KEYS[3]) == 1 then counts = hmget(KEYS[3], fields) end
local retention = {}
for i, h in ipairs(histories) do
  if h then retention[i] = redis.call('HGET', h, '') end
end
-- The keys written below and not read above: a wrong type fails here.
redis.call('HLEN', KEYS[5])
redis.call('ZCARD', KEYS[6])

-- Writes, INCRBY first (it fails on a counter that is not an integer, before anything else).
local now = now_us()
local last = next_ids(KEYS[4], #found)
each_chunk('ZREM', KEYS[1], found)
-- The dead-letter topic's hold on each message ends, as drop does: a keyed field that holds
-- another message with the key (data[i] false) is that message's, and stays.
local free, expire = {}, {}
for i, f in ipairs(fields) do
  if data[i] or not histories[i] then
    local c = counts[i]
    if c and tonumber(c) > 1 then
      redis.call('HINCRBY', KEYS[3], f, -1)
    else
      if c then redis.call('HDEL', KEYS[3], f) end
      free[#free + 1] = f
      if histories[i] and retention[i] then expire[#expire + 1] = i end
    end
  end
end
if #free > 0 then each_chunk('HDEL', KEYS[2], free) end
for _, i in ipairs(expire) do redis.call('PEXPIRE', histories[i], retention[i]) end
local hashed, scheduled, moved = {}, {}, 0
for i = 1, #found do
  local message = embedded[i] or data[i]
  if message then
    local id = string.format('%012x', last - #found + i)
    hashed[#hashed + 1] = id
    hashed[#hashed + 1] = message
    scheduled[#scheduled + 1] = now
    scheduled[#scheduled + 1] = id
    moved = moved + 1
  end
end
if moved > 0 then
  each_chunk('HSET', KEYS[5], hashed)
  schedule(KEYS[6], ARGV[2], scheduled, now)
end
return moved
