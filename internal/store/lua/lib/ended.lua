-- fragment ended; needs: int, split
-- ended notes that a consumer group is done with a keyed message: the group's entry in its
-- keyed hash (key -> the member it holds) goes, and, when the key keeps a history (a retention
-- was set at publish), the group's record in it becomes "outcome time attempt[ reason]": the
-- outcome (acked, dead-lettered or cancelled), the Redis time in µs, the attempt count and,
-- for a dead letter, the reason. Unkeyed IDs are ignored. group is {keyed = the group's keyed
-- hash, history = prefix of the history keys, name = the group's name}.
local function ended(group, id, attempt, outcome, reason, now)
  local key = key_of(id)
  if not key then return end
  redis.call('HDEL', group.keyed, key)
  local h = group.history .. key
  if redis.call('EXISTS', h) == 1 then
    local record = outcome .. ' ' .. int(now) .. ' ' .. int(attempt)
    if reason and reason ~= '' then record = record .. ' ' .. reason end
    redis.call('HSET', h, group.name, record)
  end
end
