-- fragment each_chunk; needs: nothing
-- Lua's unpack takes a few thousand values at most, so variadic commands go in chunks.
local CHUNK = 1000

-- each_chunk calls redis.call(cmd, key, values...) for every CHUNK values (an even number, so
-- score/member pairs stay together) and returns the replies.
local function each_chunk(cmd, key, values)
  local replies = {}
  for i = 1, #values, CHUNK do
    replies[#replies + 1] = redis.call(cmd, key, unpack(values, i, math.min(i + CHUNK - 1, #values)))
  end
  return replies
end
