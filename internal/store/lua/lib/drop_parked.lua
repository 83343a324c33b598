-- fragment drop_parked; needs: split, each_chunk, drop
-- drop_parked drops up to n members of a topic's parked set once the set is the leftover of a
-- closed new-group window (see register.lua): the set's hold on each message ends (see drop),
-- so a message no group holds any longer is deleted. Returns how many members are left.
local function drop_parked(parked, messages, refs, history, n)
  local members = redis.call('ZRANGE', parked, 0, n - 1)
  if #members == 0 then return 0 end
  local ids = {}
  for i, m in ipairs(members) do ids[i] = (split(m)) end
  each_chunk('ZREM', parked, members)
  drop(messages, refs, ids, history)
  return redis.call('ZCARD', parked)
end
