-- fragment drop; needs: int, split, each_chunk, hmget, exists_count
-- drop_histories starts the retention of the histories of the keys whose fields `free` names
-- (other fields are ignored): each history expires its retention (ms, its field "") from now.
-- kept is as drop's; without it, one EXISTS tells whether any of them has a history, in the
-- common case of none.
local function drop_histories(history, free, kept)
  local histories = {}
  for _, f in ipairs(free) do
    -- 61 is "=": only a keyed message's field starts with it.
    if string.byte(f, 1) == 61 then
      local key = string.sub(f, 2)
      if kept == nil or kept[key] then histories[#histories + 1] = history .. key end
    end
  end
  if #histories == 0 then return end
  if kept == nil and #histories > 1 and exists_count(histories) == 0 then return end
  for _, h in ipairs(histories) do
    local retention = redis.call('HGET', h, '')
    if retention then redis.call('PEXPIRE', h, retention) end
  end
end

-- holders_text maps a count of holders to its text and back, for the common small counts, once
-- a call needs it: tonumber and a number argument (which Redis formats with printf) each cost
-- Redis a few thousand instructions per message, a table lookup next to nothing.
local holders_text = nil

-- drop ends one group's interest in the messages with the given IDs: each stored message is
-- deleted once no other group holds it (refs counts the groups while more than one does). When
-- the message of a key goes, the key is free again; its history (see ended), if it has one,
-- then expires after its retention. history is the prefix of the history keys; kept, when
-- given, the keys whose history exists (see ended_all), else drop looks. An ID given n times
-- ends n holds.
local function drop(messages, refs, ids, history, kept)
  if #ids == 0 then return end
  local fields = {}
  for i, id in ipairs(ids) do fields[i] = field(id) end
  local free = fields
  if redis.call('EXISTS', refs) == 1 then
    -- One HMGET, HDEL and HSET for all of them, not one HINCRBY each; times: how many of
    -- the IDs name each field, which fields then holds once.
    local times, unique = {}, {}
    for _, f in ipairs(fields) do
      if not times[f] then unique[#unique + 1], times[f] = f, 0 end
      times[f] = times[f] + 1
    end
    fields, free = unique, {}
    local left, gone = {}, {}
    holders_text = holders_text or {'1', '2', '3', '4', '5', '6', '7', '8', '9',
      ['1'] = 1, ['2'] = 2, ['3'] = 3, ['4'] = 4, ['5'] = 5, ['6'] = 6, ['7'] = 7, ['8'] = 8, ['9'] = 9}
    for i, holders in ipairs(hmget(refs, fields)) do
      local f = fields[i]
      local count = nil
      if holders then
        count = holders_text[holders]
        if not count then count = tonumber(holders) end
        count = count - times[f]
      end
      if not count then
        free[#free + 1] = f
      elseif count <= 0 then
        gone[#gone + 1], free[#free + 1] = f, f
      else
        local text = holders_text[count]
        if not text then text = int(count) end
        left[#left + 1] = f
        left[#left + 1] = text
      end
    end
    if #gone > 0 then each_chunk('HDEL', refs, gone) end
    if #left > 0 then each_chunk('HSET', refs, left) end
  end
  if #free > 0 then each_chunk('HDEL', messages, free) end
  drop_histories(history, free, kept)
end
