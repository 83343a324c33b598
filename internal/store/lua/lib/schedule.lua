-- fragment schedule; needs: each_chunk, head, wake
-- schedule adds score/member pairs to a group's due set and wakes the group's subscribers when
-- the earliest of them (min_score) comes before the set's earliest due time until now.
local function schedule(due, channel, pairs, min_score)
  local before = head(due)
  each_chunk('ZADD', due, pairs)
  wake(channel, before, min_score)
end
