-- release.lua: gives claimed messages back to their group, due at their original due time, when
-- a subscription stops (Close or a cancelled Subscribe context). A message that was claimed but
-- never handed to the application does not count as an attempt.
--
-- KEYS[1] due       zset  ID -> due time (µs)
-- KEYS[2] lease     zset  ID -> lease deadline (µs)
-- KEYS[3] attempts  hash  ID -> attempts so far
-- ARGV[1] wake channel of the group
-- ARGV[2..] quadruples: ID, attempt, due time (µs), 1 if it was handed out else 0
--
-- Returns the number of messages released; a message whose lease was already lost is skipped.

local before = head(KEYS[1])
local min_score = nil
local released = 0
for i = 2, #ARGV, 4 do
  local id, attempt, score, delivered = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3]
  if holds(KEYS[2], KEYS[3], id, attempt) then
    redis.call('ZREM', KEYS[2], id)
    redis.call('ZADD', KEYS[1], score, id)
    if delivered == '0' and redis.call('HINCRBY', KEYS[3], id, -1) <= 0 then
      redis.call('HDEL', KEYS[3], id)
    end
    if min_score == nil or score < min_score then min_score = score end
    released = released + 1
  end
end
if min_score ~= nil then wake(ARGV[1], before, min_score) end
return released
