-- extend.lua: extends the leases a consumer still holds (the heartbeat).
--
-- fragments: now_us, split, each_chunk, held
-- KEYS[1] lease  zset  ID:attempt -> lease deadline (µs)
-- ARGV[1] lease timeout in µs, counted from the Redis clock now
-- ARGV[2] the group's epoch the leases were claimed in (see lease_marker in lib)
-- ARGV[3..] lease members (ID:attempt, the fencing tokens)
--
-- Returns the IDs whose lease had been lost (or is not of that epoch); nothing is written for them.

local deadline = now_us() + tonumber(ARGV[1])
local members = {}
for i = 3, #ARGV do members[#members + 1] = ARGV[i] end
local leased = held(KEYS[1], members, ARGV[2])
local extended, lost = {}, {}
for _, m in ipairs(members) do
  if leased[m] then
    extended[#extended + 1] = deadline
    extended[#extended + 1] = m
  else
    lost[#lost + 1] = (split(m))
  end
end
if #extended > 0 then
  for i = 1, #extended, CHUNK do
    redis.call('ZADD', KEYS[1], 'XX', unpack(extended, i, math.min(i + CHUNK - 1, #extended)))
  end
end
return lost
