-- deadletter.lua: moves a message that ran out of attempts from its consumer group to the
-- dead-letter topic, atomically, when both share a hash slot: the dead letter is published to
-- every group registered on the dead-letter topic (see publish_to in lib.lua) and the source
-- group's hold on the message ends. (A dead-letter topic in another slot takes two steps:
-- publish.lua with a call token derived from the message, then ack.lua.)
--
-- KEYS[1]          lease     zset    source group: ID:attempt -> lease deadline (µs)
-- KEYS[2]          messages  hash    source topic: ID -> marshaled message
-- KEYS[3]          refs      hash    source topic: ID -> groups still holding it
-- KEYS[4..]        the keys of publish_to for the dead-letter topic: call, seq, messages, refs,
--                  groups, parked, then one due set per dead-letter group
-- ARGV[1]          lease member (ID:attempt, the fencing token)
-- ARGV[2..]        the arguments of publish_to: call key lifetime (ms), G, G group names, G
--                  wake channels, the dead letter (the marshaled message with its dead-letter
--                  metadata) and its schedule, "0" (due at once)
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
