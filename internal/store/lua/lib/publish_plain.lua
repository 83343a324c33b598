-- fragment publish_plain; needs: publish_score
-- publish_plain gathers the writes of a message without a key for publish_to's call p: its ID
-- (12 hex digits), data and due time score (Unix µs). It goes to the compact tier (p.later)
-- when its time bucket moves no earlier than now (see far), else to the due sets
-- (p.scheduled); in its member when it is the only holder's and small, else in the messages
-- hash (p.hashed), with its number of holders in refs (p.counted) when more than one.
local function publish_plain(p, id, data, score)
  local to, horizon = p.scheduled, p.horizon
  if horizon and score - score % horizon - horizon >= p.now and p.ngroups > 0 then
    to = p.later
    to[#to + 1] = score
  elseif score == p.now then
    to[#to + 1] = p.now_s
  else
    to[#to + 1] = score
  end
  if p.holders <= 1 and #data <= MAX_EMBEDDED then
    to[#to + 1] = id .. '|' .. data
    return
  end
  to[#to + 1] = id
  local hashed, counted = p.hashed, p.counted
  hashed[#hashed + 1] = id
  hashed[#hashed + 1] = data
  if p.holders > 1 then
    counted[#counted + 1] = id
    counted[#counted + 1] = p.holders
  end
end
