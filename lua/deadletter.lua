-- deadletter.lua: moves a message that ran out of attempts from its consumer group to the
-- dead-letter topic, atomically: the dead letter is published to every group registered on the
-- dead-letter topic (see publish_to in lib.lua) and the source group's hold on the message ends.
-- The dead-letter topic shares the source topic's hash tag, so all keys live in one slot.
--
-- KEYS[1]          lease     zset    source group: ID:attempt -> lease deadline (µs)
-- KEYS[2]          messages  hash    source topic: ID -> marshaled message
-- KEYS[3]          refs      hash    source topic: ID -> groups still holding it
-- KEYS[4]          seq       string  dead-letter topic: internal ID counter
-- KEYS[5]          messages  hash    dead-letter topic: ID -> marshaled message
-- KEYS[6]          refs      hash    dead-letter topic: ID -> groups still holding it
-- KEYS[7]          groups    set     dead-letter topic: registered consumer groups
-- KEYS[8..7+G]     due       zset    dead-letter topic: one per group in ARGV[4..3+G]
-- ARGV[1]          lease member (ID:attempt, the fencing token)
-- ARGV[2]          number of dead-letter groups the caller believes are registered
-- ARGV[3]          G
-- ARGV[4..3+G]     dead-letter group names
-- ARGV[4+G..3+2G]  their wake channels
-- ARGV[4+2G]       the dead letter: the marshaled message with its dead-letter metadata
-- ARGV[5+2G]       its schedule, "0" (due at once)
--
-- Returns {1, dead-letter ID} when moved, {-1} when the lease had been lost (nothing changed), or
-- {0, group...} when the view of the dead-letter groups is stale (nothing changed).

if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return {-1} end
local result = publish_to(4, 2)
if result[1] == 1 then
  redis.call('ZREM', KEYS[1], ARGV[1])
  drop(KEYS[2], KEYS[3], {(split(ARGV[1]))})
end
return result
