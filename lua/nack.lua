-- nack.lua: makes a nacked message due again after a delay. When the consumer changed the
-- message (for example middleware.DelayOnError rewrote its delay metadata), the new version is
-- stored under a new ID that only this group holds, and this group's hold on the old one ends.
--
-- KEYS[1] due       zset    ID -> due time (µs)
-- KEYS[2] lease     zset    ID -> lease deadline (µs)
-- KEYS[3] attempts  hash    ID -> attempts so far
-- KEYS[4] messages  hash    ID -> marshaled message
-- KEYS[5] refs      hash    ID -> groups still holding it
-- KEYS[6] seq       string  internal ID counter of the topic
-- ARGV[1] ID
-- ARGV[2] attempt (fencing token)
-- ARGV[3] delay in µs after the Redis clock now
-- ARGV[4] wake channel of the group
-- ARGV[5] the changed marshaled message, or absent when unchanged
--
-- Returns the due time in µs, or -1 when the lease had been lost and nothing changed.

local id, attempt = ARGV[1], ARGV[2]
if not holds(KEYS[2], KEYS[3], id, attempt) then return -1 end

local score = now_us() + math.max(tonumber(ARGV[3]), 0)
if ARGV[5] then
  local new_id = string.format('%012x', redis.call('INCR', KEYS[6]))
  redis.call('HSET', KEYS[4], new_id, ARGV[5])
  finish(KEYS[2], KEYS[3], KEYS[4], KEYS[5], id)
  redis.call('HSET', KEYS[3], new_id, attempt)
  id = new_id
else
  redis.call('ZREM', KEYS[2], id)
end
local before = head(KEYS[1])
redis.call('ZADD', KEYS[1], score, id)
wake(ARGV[4], before, score)
return score
