-- fragment head; needs: nothing
-- head returns the lowest score of a sorted set, or nil when it is empty.
local function head(zset)
  local h = redis.call('ZRANGE', zset, 0, 0, 'WITHSCORES')
  if h[2] then return tonumber(h[2]) end
  return nil
end
