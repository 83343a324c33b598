-- nack.lua: makes a nacked message due again after a delay. When the consumer changed the
-- message (for example middleware.DelayOnError rewrote its delay metadata), the new version is
-- stored under a new ID that only this group holds, and this group's hold on the old one ends.
-- A keyed message is stored once per topic under its key, so its new version replaces it in
-- place, for every group that still holds it.
--
-- fragments: now_us, next_ids, split, member, schedule, drop, lease_marker
-- KEYS[1] due       zset    member (see scripts.go) -> due time (µs)
-- KEYS[2] lease     zset    ID:attempt -> lease deadline (µs)
-- KEYS[3] messages  hash    field (see scripts.go) -> marshaled message
-- KEYS[4] refs      hash    field -> groups still holding it
-- KEYS[5] seq       string  internal ID counter of the topic
-- KEYS[6] history   prefix  of the history keys of keyed messages
-- ARGV[1] lease member (ID:attempt, the fencing token)
-- ARGV[2] delay in µs after the Redis clock now
-- ARGV[3] wake channel of the group
-- ARGV[4] the group's epoch the lease was claimed in (see lease_marker in lib)
-- ARGV[5] the changed marshaled message, or absent when unchanged
--
-- Returns the due time in µs, or -1 when the lease had been lost (or is not of that epoch) and
-- nothing changed.

local id, attempt = split(ARGV[1])
local delay = tonumber(ARGV[2])
if attempt == nil or delay == nil then
  return redis.error_reply('nack: malformed lease member or delay')
end
local scores = redis.call('ZMSCORE', KEYS[2], ARGV[1], lease_marker(ARGV[4]))
if not scores[1] or not scores[2] then return -1 end
local score = now_us() + math.max(delay, 0)
redis.call('ZREM', KEYS[2], ARGV[1])
if ARGV[5] and key_of(id) then
  redis.call('HSET', KEYS[3], field(id), string.sub(id, 1, 12) .. ARGV[5])
elseif ARGV[5] then
  local new_id = string.format('%012x', next_ids(KEYS[5], 1))
  redis.call('HSET', KEYS[3], new_id, ARGV[5])
  drop(KEYS[3], KEYS[4], {id}, KEYS[6])
  id = new_id
end
local m = member(id, attempt)
schedule(KEYS[1], ARGV[3], {score, m}, score, m)
return score
