-- requeue.lua: moves dead letters back to the consumer group they came from, due at once: each
-- is removed from its dead-letter set (and its stored copy dropped) and stored anew on the
-- source topic under a new ID that only that group holds. Dead letters are stored without a
-- key, so requeued messages have none. The dead-letter topic shares the source topic's hash
-- slot (DefaultDeadLetterTopic).
--
-- KEYS[1] dead      zset    the dead-letter topic's parked set, or a due set of one of its groups
-- KEYS[2] dmessages hash    the dead-letter topic's messages
-- KEYS[3] drefs     hash    the dead-letter topic's refs
-- KEYS[4] seq       string  the source topic's ID counter
-- KEYS[5] messages  hash    the source topic's messages
-- KEYS[6] due       zset    the source group's due set
-- ARGV[1] the source group's wake channel
-- ARGV[2..] members of the dead-letter set to requeue
--
-- Returns the number requeued; members no longer in the set are skipped.

local now = now_us()
local members = {}
for i = 2, #ARGV do members[#members + 1] = ARGV[i] end
if #members == 0 then return 0 end
local present = {}
for _, reply in ipairs(each_chunk('ZMSCORE', KEYS[1], members)) do
  for _, s in ipairs(reply) do present[#present + 1] = s end
end
local found, ids, embedded = {}, {}, {}
for i, m in ipairs(members) do
  if present[i] then
    local id, _, message = split(m)
    found[#found + 1] = m
    ids[#ids + 1] = id
    embedded[#embedded + 1] = message or false
  end
end
if #found == 0 then return 0 end
local data = stored(KEYS[2], ids)
local last = redis.call('INCRBY', KEYS[4], #found)
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
each_chunk('ZREM', KEYS[1], found)
drop(KEYS[2], KEYS[3], ids, '')
if moved > 0 then
  each_chunk('HSET', KEYS[5], hashed)
  schedule(KEYS[6], ARGV[1], scheduled, now)
end
return moved
