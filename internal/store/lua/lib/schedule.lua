-- fragment schedule; needs: each_chunk, head, wake
-- schedule adds score/member pairs to a group's due set and wakes the group's subscribers when
-- the earliest of them (min_score) comes before the set's earliest due time until now. Given
-- first, the member scored min_score, it asks after the ZADD whether first heads the set (ZRANK
-- 0: no member scored lower, nor scored the same and sorted before it), whose reply is an
-- integer; without it, it reads the set's head before the ZADD, whose reply is a member and a
-- score that Redis formats with printf (about 9k instructions more). The two wake alike but for
-- a tie, which the ZRANK wakes for too: a wake-up that finds nothing new.
local function schedule(due, channel, pairs, min_score, first)
  if first then
    each_chunk('ZADD', due, pairs)
    if redis.call('ZRANK', due, first) == 0 then wake(channel, nil, min_score) end
    return
  end
  local before = head(due)
  each_chunk('ZADD', due, pairs)
  wake(channel, before, min_score)
end
