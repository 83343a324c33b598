-- fragment stored; needs: split, hmget
-- stored returns the marshaled messages of the given IDs (nil where there is none): the field
-- of a keyed message holds its 12 hex digits before the message, and a value of another
-- message with the same key (an older or newer one) counts as none.
local function stored(messages, ids)
  local fields = {}
  for i, id in ipairs(ids) do fields[i] = field(id) end
  local data = {}
  if #fields > 0 then data = hmget(messages, fields) end
  for i, id in ipairs(ids) do
    if data[i] and string.sub(id, 13, 13) == '=' then
      if string.sub(data[i], 1, 12) == string.sub(id, 1, 12) then
        data[i] = string.sub(data[i], 13)
      else
        data[i] = false
      end
    end
  end
  return data
end
