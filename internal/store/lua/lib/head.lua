-- fragment head; needs: nothing
-- head returns the lowest score of a sorted set below +inf, or nil when there is none: a lease
-- set's marker (see scripts.go), scored +inf, is no lease. The set's first member is its
-- lowest: a ZRANGE of rank 0 reads it for less than a range by score (whose bounds Redis parses
-- as numbers), and only the marker's score, "inf", is not below math.huge. The ranks go as text:
-- Redis 7.0 formats a number argument with printf's %.17g, about 2k instructions each.
local function head(zset)
  local h = tonumber(redis.call('ZRANGE', zset, '0', '0', 'WITHSCORES')[2])
  if h and h < math.huge then return h end
  return nil
end
