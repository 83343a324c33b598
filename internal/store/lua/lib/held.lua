-- fragment held; needs: each_chunk, lease_marker
-- held returns which of the given lease members are still leased: a table member -> true. With
-- an epoch, none is when the lease set does not hold that epoch's marker (see lease_marker).
--
-- It finds them by scoring them 0 (ZADD XX CH: a member that is not leased is not added), and
-- every caller removes or scores anew, in the same script, each member it reports (ack,
-- release, extend): so no lease keeps the score 0. Redis 7.0 formats every score it replies
-- with with printf's "%.17g", about 4k instructions for a lease deadline in µs, which a
-- ZMSCORE of the members paid per acked message (a seventh of a claim and its ack); the
-- count of members changed answers for all of them at once, and only when it falls short (a
-- member that lost its lease) does a ZMSCORE read which, each 0 then (cheap to format) or nil.
local function held(lease, members, epoch)
  local leased = {}
  if #members == 0 then return leased end
  if epoch and not redis.call('ZSCORE', lease, lease_marker(epoch)) then return leased end
  local zeroed = {}
  for i, m in ipairs(members) do
    zeroed[2 * i - 1] = '0'
    zeroed[2 * i] = m
  end
  local changed = 0
  for i = 1, #zeroed, CHUNK do
    changed = changed + redis.call('ZADD', lease, 'XX', 'CH', unpack(zeroed, i, math.min(i + CHUNK - 1, #zeroed)))
  end
  if changed == #members then
    for _, m in ipairs(members) do leased[m] = true end
    return leased
  end
  local scores = {}
  for _, reply in ipairs(each_chunk('ZMSCORE', lease, members)) do
    for _, s in ipairs(reply) do scores[#scores + 1] = s end
  end
  for i, m in ipairs(members) do
    if scores[i] then leased[m] = true end
  end
  return leased
end
