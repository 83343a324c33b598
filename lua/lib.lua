-- lib.lua: helpers prepended to every script. It declares no keys of its own.

-- now_us is the Redis server clock in Unix microseconds. Scripts never take time from clients.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- head returns the lowest score of a sorted set, or nil when it is empty.
local function head(zset)
  local h = redis.call('ZRANGE', zset, 0, 0, 'WITHSCORES')
  if h[2] then return tonumber(h[2]) end
  return nil
end

-- wake tells the subscribers of a group that a message is due at `score` when that is earlier
-- than the group's earliest due time before the change (`before`, nil for an empty set).
local function wake(channel, before, score)
  if before == nil or score < before then
    redis.call('PUBLISH', channel, string.format('%d', score))
  end
end

-- holds reports whether the claim (id, attempt) still owns its lease. The attempt number is
-- the fencing token: once a lease expires and another consumer claims the message, the
-- attempt number moves on and the old holder's ack, nack or extension is refused.
local function holds(lease, attempts, id, attempt)
  return redis.call('HGET', attempts, id) == attempt and redis.call('ZSCORE', lease, id) ~= false
end

-- finish ends a group's interest in a message: its lease and attempt count go, and the stored
-- message goes too once no other group holds it.
local function finish(lease, attempts, messages, refs, id)
  redis.call('ZREM', lease, id)
  redis.call('HDEL', attempts, id)
  if redis.call('HEXISTS', refs, id) == 1 then
    if redis.call('HINCRBY', refs, id, -1) > 0 then return end
    redis.call('HDEL', refs, id)
  end
  redis.call('HDEL', messages, id)
end

-- All times are Unix microseconds on the Redis clock: exact integers in a Lua double until the
-- year 2255, and fine enough that rounding never makes a message late or early.
