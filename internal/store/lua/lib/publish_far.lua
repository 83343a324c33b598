-- fragment publish_far; needs: each_chunk, far, head, schedule, wake
-- publish_far writes p.later, the score/member pairs that publish_to's call p keeps for the
-- compact tier (see publish_plain): to the parked set while the topic parks its messages (see
-- publish_window), and to every group's compact tier (see far).
local function publish_far(p)
  local later = p.later
  if p.parking then each_chunk('ZADD', p.parked, later) end
  for g = 1, p.ngroups do
    local epoch = redis.call('GET', p.epoch[g])
    local due, far = p.due[g], p.far[g]
    if epoch then
      -- The group's subscriptions sleep until its next due time or bucket move: a bucket
      -- that moves before both wakes them (claim.lua moves it).
      local before, move = head(due), head(far)
      if move and (before == nil or move < before) then before = move end
      wake(p.channel[g], before, far_put(far, epoch, p.horizon, later))
    else
      -- A group registered before epochs existed has none: its due set takes them.
      local min_score = later[1]
      for i = 3, #later, 2 do min_score = math.min(min_score, later[i]) end
      schedule(due, p.channel[g], later, min_score)
    end
  end
end
