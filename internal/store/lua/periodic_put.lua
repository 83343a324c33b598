-- periodic_put.lua: creates or updates a periodic schedule and arms its first tick, atomically:
-- the schedule's state hash and the first tick message on the tick topic (see publish_to in
-- lib) are written together or not at all. The definition is compared byte for byte: an equal
-- one changes nothing. A new one replaces the old, gets the new version (so that every tick
-- message of the old version is stale, see periodic_advance.lua) and arms its first tick,
-- unless the schedule is paused or the spec has no future tick.
--
-- fragments: publish_to
-- KEYS[1]           schedule  hash    the schedule's state (see keys.go)
-- KEYS[2]           index     zset    every schedule's name, scored 0 (read BYLEX)
-- KEYS[3]           call      string  this call's token: holds the reply once it ran
-- KEYS[4]           seq       string  the tick topic's internal ID counter
-- KEYS[5]           messages  hash    field -> marshaled message
-- KEYS[6]           refs      hash    field -> number of groups still holding it
-- KEYS[7]           groups    set     registered consumer groups
-- KEYS[8]           parked    zset    tick messages no group has taken yet
-- KEYS[9]           history   prefix  of the history keys of keyed messages
-- KEYS[10]          batches   hash    batch key -> its open batch (none on the tick topic)
-- KEYS[11]          window    hash    the tick topic's new-group window
-- KEYS[12]          debounce  prefix  of the debounce caps (none on the tick topic)
-- KEYS[13..12+G]    due       zset    one per group of the tick topic
-- KEYS[13+G..12+2G] keyed     hash    one per group: key -> member, once claimed
-- KEYS[13+2G..12+3G] far      zset    one per group: its compact tier's index, prefix of its buckets
-- KEYS[13+3G..12+4G] epoch    string  one per group: its registration (see register.lua)
-- ARGV[1]           the schedule's name
-- ARGV[2]           its definition (JSON)
-- ARGV[3]           the new version: a random token
-- ARGV[4]           the first tick's nominal time, Unix ms, or "" when the spec has none
-- ARGV[5]           the Redis clock's now (Unix µs) the caller computed the first tick from,
--                  recorded as created (new) or updated: the first tick is the first after it
--                  (this script runs later; its own now may have passed that tick already)
-- ARGV[6..]         the arguments of publish_to: call key lifetime (ms), G, G group names, G wake
--                  channels, then the first tick message
--
-- Returns {1, "created" | "updated" | "unchanged", version}, or {0, group...} when the view of
-- the tick topic's groups is stale (nothing written).

local h, index = KEYS[1], KEYS[2]
local old = redis.call('HGET', h, 'def')
if old == ARGV[2] then return {1, 'unchanged', redis.call('HGET', h, 'ver')} end
local paused = redis.call('HGET', h, 'paused') == '1'
if not paused and ARGV[4] ~= '' then
  local result = publish_to(3, 6)
  if result[1] ~= 1 then return result end
  redis.call('HSET', h, 'next', ARGV[4])
else
  redis.call('HDEL', h, 'next')
end
local at = ARGV[5]
redis.call('HSET', h, 'def', ARGV[2], 'ver', ARGV[3], 'updated', at)
redis.call('HDEL', h, 'buffered')
if not old then redis.call('HSET', h, 'created', at) end
redis.call('ZADD', index, 0, ARGV[1])
if old then return {1, 'updated', ARGV[3]} end
return {1, 'created', ARGV[3]}
