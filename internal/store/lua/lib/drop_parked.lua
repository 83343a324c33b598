-- fragment drop_parked; needs: split, each_chunk, hmget, drop
-- drop_parked drops up to n members of a topic's parked set once the set is the leftover of a
-- closed new-group window (see register.lua): the set's hold on each message ends (see drop),
-- so a message no group holds any longer is deleted; a member that embeds its message (a
-- single-group topic's copy, see publish_window) holds nothing else and just goes. The
-- window's copy of a keyed message is its plain ID (window_id), never the key's field; a copy
-- parked by a version that held the key (no plain copy, the key's field naming the ID) ends
-- that hold. Returns how many members are left.
local function drop_parked(parked, messages, refs, history, n)
  local members = redis.call('ZRANGE', parked, 0, n - 1)
  if #members == 0 then return 0 end
  local ids, holding, copies, keyed = {}, {}, {}, {}
  for _, m in ipairs(members) do
    local id, _, message = split(m)
    -- A member that embeds its message is a copy of its own: no set's hold to end.
    if not message then
      local at = #holding + 1
      holding[at], ids[at] = m, window_id(id)
      if ids[at] ~= id then copies[#copies + 1], keyed[#keyed + 1] = ids[at], at end
    end
  end
  if #copies > 0 then
    for j, copy in ipairs(hmget(messages, copies)) do
      local i = keyed[j]
      if not copy then
        local id = (split(holding[i]))
        local holder = redis.call('HGET', messages, field(id))
        if holder and string.sub(holder, 1, 12) == ids[i] then ids[i] = id end
      end
    end
  end
  each_chunk('ZREM', parked, members)
  if #ids > 0 then drop(messages, refs, ids, history) end
  return redis.call('ZCARD', parked)
end
