-- extend.lua: extends the leases a consumer still holds (the heartbeat).
--
-- KEYS[1] lease     zset  ID -> lease deadline (µs)
-- KEYS[2] attempts  hash  ID -> attempts so far
-- ARGV[1] lease timeout in µs, counted from the Redis clock now
-- ARGV[2..] pairs: ID, attempt (fencing token)
--
-- Returns the IDs whose lease had been lost; their leases are left untouched.

local deadline = now_us() + tonumber(ARGV[1])
local lost = {}
for i = 2, #ARGV, 2 do
  local id, attempt = ARGV[i], ARGV[i + 1]
  if holds(KEYS[1], KEYS[2], id, attempt) then
    redis.call('ZADD', KEYS[1], 'XX', deadline, id)
  else
    table.insert(lost, id)
  end
end
return lost
