-- fragment now_us; needs: nothing
-- now_us is the Redis server clock in Unix microseconds. Scripts never take time from clients.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
