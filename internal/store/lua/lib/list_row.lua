-- fragment list_row; needs: split
-- list_row appends to result the row of a list page (see list.lua) for member m due at score:
-- m, or the short form "ID|" of a member that holds its message; score; the stored message's
-- size (-1 when it has vanished); its first prefix bytes or false. read is the bytes of stored
-- messages the page has read so far; a message stored in messages (the hash) that would take
-- it past budget is not read unless first. Returns the bytes read after the row, or nil when
-- the row was left out for the budget.
local function list_row(result, messages, m, score, prefix, read, budget, first)
  local id, _, data = split(m)
  local size = -1
  if data then
    m = string.sub(m, 1, 13)
  else
    local f = field(id)
    local keyed = f ~= id
    size = redis.call('HSTRLEN', messages, f)
    if keyed then size = size - 12 end
    if not first and read + size > budget then return nil end
    data = redis.call('HGET', messages, f)
    if data and keyed then
      -- A keyed field that holds another message with the key counts as none (see stored).
      if string.sub(data, 1, 12) == string.sub(id, 1, 12) then data = string.sub(data, 13) else data = false end
    end
  end
  if data then size = #data else size = -1 end
  result[#result + 1] = m
  result[#result + 1] = tonumber(score)
  result[#result + 1] = size
  result[#result + 1] = data and string.sub(data, 1, prefix) or false
  if size > 0 then read = read + size end
  return read
end
