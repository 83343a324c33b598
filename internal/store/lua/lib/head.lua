-- fragment head; needs: nothing
-- head returns the lowest score of a sorted set below +inf, or nil when there is none: a lease
-- set's marker (see scripts.go), scored +inf, is no lease.
local function head(zset)
  local h = redis.call('ZRANGEBYSCORE', zset, '-inf', '(1e300', 'WITHSCORES', 'LIMIT', 0, 1)
  if h[2] then return tonumber(h[2]) end
  return nil
end
