-- fragment held; needs: each_chunk
-- held returns which of the given lease members are still leased: a table member -> true.
local function held(lease, members)
  local leased = {}
  if #members == 0 then return leased end
  local scores = {}
  for _, reply in ipairs(each_chunk('ZMSCORE', lease, members)) do
    for _, s in ipairs(reply) do scores[#scores + 1] = s end
  end
  for i, m in ipairs(members) do
    if scores[i] then leased[m] = true end
  end
  return leased
end
