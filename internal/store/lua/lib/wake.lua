-- fragment wake; needs: int
-- wake tells the subscribers of a group that a message is due at `score` when that is earlier
-- than the group's earliest due time before the change (`before`, nil for an empty set).
-- It uses sharded Pub/Sub, which keeps the message on the shard of the channel (the channel
-- carries the topic's hash tag, so it is in the slot of the script's keys), and falls back to
-- classic PUBLISH where Redis refuses SPUBLISH (before 7, miniredis). Subscribers choose the
-- same way: SSUBSCRIBE, or SUBSCRIBE where Redis refuses it (internal/wake).
local function wake(channel, before, score)
  if before == nil or score < before then
    local payload = int(score)
    local sent = redis.pcall('SPUBLISH', channel, payload)
    if type(sent) == 'table' and sent.err then
      redis.call('PUBLISH', channel, payload)
    end
  end
end
