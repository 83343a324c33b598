-- fragment drop; needs: split, each_chunk, hmget
-- drop ends one group's interest in the messages with the given IDs: each stored message is
-- deleted once no other group holds it (refs counts the groups while more than one does). When
-- the message of a key goes, the key is free again; its history (see ended), if it has one,
-- then expires after its retention. history is the prefix of the history keys.
local function drop(messages, refs, ids, history)
  if #ids == 0 then return end
  local fields = {}
  for i, id in ipairs(ids) do fields[i] = field(id) end
  local free = fields
  if redis.call('EXISTS', refs) == 1 then
    free = {}
    local counts = hmget(refs, fields)
    for i, f in ipairs(fields) do
      if not counts[i] then
        free[#free + 1] = f
      elseif redis.call('HINCRBY', refs, f, -1) <= 0 then
        redis.call('HDEL', refs, f)
        free[#free + 1] = f
      end
    end
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
