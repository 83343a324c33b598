-- fragment held; needs: each_chunk, lease_marker
-- held returns which of the given lease members are still leased: a table member -> true. With
-- an epoch, none is when the lease set does not hold that epoch's marker (see lease_marker): the
-- marker is looked up in the same ZMSCORE.
local function held(lease, members, epoch)
  local leased = {}
  if #members == 0 then return leased end
  local asked = members
  if epoch then
    asked = {lease_marker(epoch)}
    for _, m in ipairs(members) do asked[#asked + 1] = m end
  end
  local scores = {}
  for _, reply in ipairs(each_chunk('ZMSCORE', lease, asked)) do
    for _, s in ipairs(reply) do scores[#scores + 1] = s end
  end
  if epoch and not scores[1] then return leased end
  local first = #asked - #members
  for i, m in ipairs(members) do
    if scores[first + i] then leased[m] = true end
  end
  return leased
end
