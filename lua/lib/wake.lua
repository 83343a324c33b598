-- fragment wake; needs: nothing
-- wake tells the subscribers of a group that a message is due at `score` when that is earlier
-- than the group's earliest due time before the change (`before`, nil for an empty set).
local function wake(channel, before, score)
  if before == nil or score < before then
    redis.call('PUBLISH', channel, string.format('%d', score))
  end
end
