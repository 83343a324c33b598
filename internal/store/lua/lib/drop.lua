-- fragment drop; needs: split, each_chunk, hmget
-- drop ends one group's interest in the messages with the given IDs: each stored message is
-- deleted once no other group holds it (refs counts the groups while more than one does). When
-- the message of a key goes, the key is free again; its history (see ended), if it has one,
-- then expires after its retention. history is the prefix of the history keys. An ID given
-- n times ends n holds.
local function drop(messages, refs, ids, history)
  if #ids == 0 then return end
  -- fields: each message's field once; times: how many of the IDs name it.
  local fields, times = {}, {}
  for _, id in ipairs(ids) do
    local f = field(id)
    if not times[f] then fields[#fields + 1], times[f] = f, 0 end
    times[f] = times[f] + 1
  end
  local free = fields
  if redis.call('EXISTS', refs) == 1 then
    -- One HMGET, HDEL and HSET for all of them, not one HINCRBY each.
    free = {}
    local left, gone = {}, {}
    for i, holders in ipairs(hmget(refs, fields)) do
      local f = fields[i]
      local count = nil
      if holders then count = tonumber(holders) - times[f] end
      if not count then
        free[#free + 1] = f
      elseif count <= 0 then
        gone[#gone + 1], free[#free + 1] = f, f
      else
        left[#left + 1] = f
        left[#left + 1] = count
      end
    end
    if #gone > 0 then each_chunk('HDEL', refs, gone) end
    if #left > 0 then each_chunk('HSET', refs, left) end
  end
  if #free > 0 then each_chunk('HDEL', messages, free) end
  for _, f in ipairs(free) do
    if string.sub(f, 1, 1) == '=' then
      local h = history .. string.sub(f, 2)
      local retention = redis.call('HGET', h, '')
      if retention then redis.call('PEXPIRE', h, retention) end
    end
  end
end
