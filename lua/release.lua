-- release.lua: gives claimed messages back to their group, due at their original due time, when
-- a subscription stops (Close or a cancelled Subscribe context). A message that was claimed but
-- never handed to the application does not count as an attempt.
--
-- KEYS[1] due    zset  member (see lib.lua) -> due time (µs)
-- KEYS[2] lease  zset  ID:attempt -> lease deadline (µs)
-- ARGV[1] wake channel of the group
-- ARGV[2..] triples: lease member (ID:attempt), due time (µs), 1 if it was handed out else 0
--
-- Returns the number of messages released; a message whose lease was already lost is skipped.

local before = head(KEYS[1])
local min_score = nil
local released, back = {}, {}
for i = 2, #ARGV, 3 do
  local leased, score, delivered = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
  if redis.call('ZREM', KEYS[2], leased) == 1 then
    local id, attempt = split(leased)
    if delivered == '0' then attempt = attempt - 1 end
    back[#back + 1] = score
    back[#back + 1] = member(id, attempt)
    if min_score == nil or score < min_score then min_score = score end
    released[#released + 1] = id
  end
end
if #back > 0 then
  each_chunk('ZADD', KEYS[1], back)
  wake(ARGV[1], before, min_score)
end
return #released
