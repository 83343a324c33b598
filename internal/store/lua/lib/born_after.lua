-- fragment born_after; needs: nothing
-- born_after reports whether the ID counter seq was created after epoch (an ID of 12 hex
-- digits) was drawn from it, or does not exist: Redis lost the data the epoch was part of.
-- A counter of an older version, which has no seq:birth, counts as older than every epoch.
local function born_after(seq, epoch)
  local birth = redis.call('GET', seq .. ':birth')
  if birth then return tonumber(birth) > (tonumber(epoch, 16) or math.huge) end
  return redis.call('EXISTS', seq) == 0
end
