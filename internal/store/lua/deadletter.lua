-- deadletter.lua: moves a message that ran out of attempts from its consumer group to the
-- dead-letter topic, atomically, when both share a hash slot: the dead letter is published to
-- every group registered on the dead-letter topic (see publish_to in lib) and the source
-- group's hold on the message ends. (A dead-letter topic in another slot takes two steps:
-- publish.lua with a call token derived from the message, then ack.lua.) From KEYS[6] on, the
-- keys are the dead-letter topic's, in the order publish.lua takes them.
--
-- fragments: now_us, split, drop, ended, publish_to, lease_marker
-- KEYS[1]          lease     zset    source group: ID:attempt -> lease deadline (µs)
-- KEYS[2]          messages  hash    source topic: field -> marshaled message
-- KEYS[3]          refs      hash    source topic: field -> groups still holding it
-- KEYS[4]          keyed     hash    source group: key -> member, once claimed
-- KEYS[5]          history   prefix  source topic: of the history keys of keyed messages
-- KEYS[6]          call      string  this move's token: holds the reply once it ran
-- KEYS[7]          seq       string  internal ID counter
-- KEYS[8]          messages  hash    field -> marshaled message
-- KEYS[9]          refs      hash    field -> number of groups still holding it
-- KEYS[10]         groups    set     registered consumer groups
-- KEYS[11]         parked    zset    dead letters no consumer group has taken yet
-- KEYS[12]         history   prefix  of the history keys of keyed messages
-- KEYS[13]         batches   hash    batch key -> its open batch
-- KEYS[14]         window    hash    never exists: a dead-letter topic has no new-group window
-- KEYS[15]         debounce  prefix  of the debounce caps (unused: a dead letter has no key spec)
-- KEYS[16..15+G]   due       zset    one per dead-letter group in ARGV[6..5+G]
-- KEYS[16+G..15+2G] keyed    hash    one per dead-letter group: key -> member, once claimed
-- KEYS[16+2G..15+3G] far      zset    one per group: its compact tier's index, prefix of its buckets
-- KEYS[16+3G..15+4G] epoch    string  one per group: its registration (see register.lua)
-- ARGV[1]          lease member (ID:attempt, the fencing token)
-- ARGV[2]          the source group's name
-- ARGV[3]          the dead-letter reason
-- ARGV[4]          the source group's epoch the lease was claimed in (see lease_marker in lib)
-- ARGV[5..]        the arguments of publish_to: call key lifetime (ms), G, G group names, G
--                  wake channels, then the dead letter (the marshaled message with its
--                  dead-letter metadata), its schedule "0" (due at once) and key spec ""
--
-- Returns {1, dead-letter ID, outcomes} when moved, {-1} when the lease had been lost (nothing
-- changed), or {0, group...} when the view of the dead-letter groups is stale (nothing changed).

local scores = redis.call('ZMSCORE', KEYS[1], ARGV[1], lease_marker(ARGV[4]))
if not scores[1] or not scores[2] then return {-1} end
local result = publish_to(6, 5)
if result[1] == 1 then
  local id, attempt = split(ARGV[1])
  redis.call('ZREM', KEYS[1], ARGV[1])
  ended({keyed = KEYS[4], history = KEYS[5], name = ARGV[2]}, id, attempt, 'dead-lettered', ARGV[3], now_us())
  drop(KEYS[2], KEYS[3], {id}, KEYS[5])
end
return result
