-- fragment move_set; needs: nothing
-- move_set moves the sorted set `from` to `to`: a rename, or, when `to` exists already, a merge
-- (ZUNIONSTORE; a member in both keeps the sum of its scores, which callers rule out) and the
-- deletion of `from`. It does nothing when `from` does not exist, and returns whether it moved.
local function move_set(from, to)
  if redis.call('EXISTS', from) == 0 then return false end
  if redis.call('EXISTS', to) == 1 then
    redis.call('ZUNIONSTORE', to, 2, to, from)
    redis.call('DEL', from)
  else
    redis.call('RENAME', from, to)
  end
  return true
end
