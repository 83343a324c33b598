-- publish.lua: stores a batch of messages and schedules each for every registered consumer
-- group, atomically: all of the batch is stored, or none of it. See publish_to in lib.lua.
--
-- KEYS[1]         seq       string  internal ID counter of the topic
-- KEYS[2]         messages  hash    ID -> marshaled message
-- KEYS[3]         refs      hash    ID -> number of groups still holding it (written when > 1)
-- KEYS[4]         groups    set     registered consumer groups
-- KEYS[5..4+G]    due       zset    ID -> due time (µs), one per group in ARGV[3..2+G]
-- ARGV[1]         number of groups the caller believes are registered
-- ARGV[2]         G, the number of groups passed
-- ARGV[3..2+G]    group names
-- ARGV[3+G..2+2G] wake channels of those groups, same order
-- ARGV[3+2G..]    pairs: marshaled message, schedule: a delay in µs after the Redis clock now,
--                 or "@" and an absolute due time in Unix µs (due at once if already past)
--
-- Returns {1, first ID} on success, or {0, group...} when the caller's view of the registered
-- groups is stale; nothing is written then.

return publish_to(1, 1)
