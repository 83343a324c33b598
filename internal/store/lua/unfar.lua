-- unfar.lua: moves one message of a consumer group's compact tier (see far in lib), named by its
-- member (or short form "ID|") and due time, into the group's due set at that due time, so that
-- an operation by ref (refop.lua) can act on it there. The due set is where the message would
-- move anyway, a horizon or more before its due time, so an early move changes nothing of its
-- delivery, and a second run finds nothing more to move. Bounded as far_find is: the bucket
-- entries it reads, then one LREM that stops at the entry far_find found among them.
--
-- fragments: far_find
-- KEYS[1] due     zset    the group's due set
-- KEYS[2] far     zset    the group's compact-tier index, the prefix of its buckets and count
-- KEYS[3] groups  set     registered consumer groups
-- ARGV[1] the member, or its short form "ID|"
-- ARGV[2] its due time, Unix µs
-- ARGV[3] the group's name
--
-- Returns the whole member moved, or false when the group is not registered or the tier holds
-- no such message (within far_find's bounds).

if redis.call('SISMEMBER', KEYS[3], ARGV[3]) == 0 then return false end
local m, bucket, entry = far_find(KEYS[2], ARGV[2], ARGV[1])
if not m then return false end
local list = KEYS[2] .. ':' .. bucket
redis.call('LREM', list, 1, entry)
if redis.call('EXISTS', list) == 0 then redis.call('ZREM', KEYS[2], bucket) end
if redis.call('DECRBY', KEYS[2] .. ':n', 1) <= 0 then redis.call('DEL', KEYS[2] .. ':n') end
redis.call('ZADD', KEYS[1], ARGV[2], m)
return m
