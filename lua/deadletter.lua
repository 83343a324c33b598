-- deadletter.lua: moves a message that ran out of attempts from its consumer group to the
-- dead-letter topic, atomically: the dead letter is published to every group registered on the
-- dead-letter topic (see publish_to in lib.lua) and the source group's hold on the message ends.
-- The dead-letter topic shares the source topic's hash tag, so all keys live in one slot.
--
-- KEYS[1]          lease     zset    source group: ID -> lease deadline (µs)
-- KEYS[2]          attempts  hash    source group: ID -> attempts so far
-- KEYS[3]          messages  hash    source topic: ID -> marshaled message
-- KEYS[4]          refs      hash    source topic: ID -> groups still holding it
-- KEYS[5]          seq       string  dead-letter topic: internal ID counter
-- KEYS[6]          messages  hash    dead-letter topic: ID -> marshaled message
-- KEYS[7]          refs      hash    dead-letter topic: ID -> groups still holding it
-- KEYS[8]          groups    set     dead-letter topic: registered consumer groups
-- KEYS[9..8+G]     due       zset    dead-letter topic: one per group in ARGV[5..4+G]
-- ARGV[1]          ID of the message in the source group
-- ARGV[2]          attempt (fencing token)
-- ARGV[3]          number of dead-letter groups the caller believes are registered
-- ARGV[4]          G
-- ARGV[5..4+G]     dead-letter group names
-- ARGV[5+G..4+2G]  their wake channels
-- ARGV[5+2G]       the dead letter: the marshaled message with its dead-letter metadata
-- ARGV[6+2G]       its schedule, "0" (due at once)
--
-- Returns {1, dead-letter ID} when moved, {-1} when the lease had been lost (nothing changed), or
-- {0, group...} when the view of the dead-letter groups is stale (nothing changed).

local id, attempt = ARGV[1], ARGV[2]
if not holds(KEYS[1], KEYS[2], id, attempt) then return {-1} end
local result = publish_to(5, 3)
if result[1] == 1 then
  finish(KEYS[1], KEYS[2], KEYS[3], KEYS[4], id)
end
return result
