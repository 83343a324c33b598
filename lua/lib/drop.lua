-- fragment drop; needs: each_chunk, hmget
-- drop ends one group's interest in the messages with the given IDs: each stored message is
-- deleted once no other group holds it (refs counts the groups while more than one does).
local function drop(messages, refs, ids)
  if #ids == 0 then return end
  local free = ids
  if redis.call('EXISTS', refs) == 1 then
    free = {}
    local counts = hmget(refs, ids)
    for i, id in ipairs(ids) do
      if not counts[i] then
        free[#free + 1] = id
      elseif redis.call('HINCRBY', refs, id, -1) <= 0 then
        redis.call('HDEL', refs, id)
        free[#free + 1] = id
      end
    end
  end
  if #free > 0 then each_chunk('HDEL', messages, free) end
end
