-- fragment ack; needs: split, held, drop, each_chunk
-- ack removes the given lease members and drops their messages. It returns the IDs whose lease
-- had been lost, which are left alone.
local function ack(lease, messages, refs, members)
  local leased = held(lease, members)
  local done, ids, refused = {}, {}, {}
  for _, m in ipairs(members) do
    local id = split(m)
    if leased[m] then
      done[#done + 1] = m
      ids[#ids + 1] = id
    else
      refused[#refused + 1] = id
    end
  end
  if #done > 0 then each_chunk('ZREM', lease, done) end
  drop(messages, refs, ids)
  return refused
end
