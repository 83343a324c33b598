-- fragment publish_flush; needs: int, each_chunk, schedule; loads: publish_batch
-- publish_flush writes what publish_to's call p gathered: the entries of its open batches and
-- their pending items (when it had batch items), the messages hash, refs, then p.scheduled to
-- the parked set while the topic parks its messages (see publish_window) and to every group's
-- due set, waking the group's subscribers when the earliest comes first.
local function publish_flush(p)
  if p.open_batches then
    local entries = {}
    for bk, b in pairs(p.open_batches) do
      if b then
        entries[#entries + 1] = bk
        entries[#entries + 1] = b.hex .. ' ' .. int(b.n) .. ' ' .. int(b.size) .. ' ' .. int(b.due)
      end
    end
    if #entries > 0 then each_chunk('HSET', p.batches, entries) end
    load_fragments().batch_write(p)
  end
  if #p.hashed > 0 then each_chunk('HSET', p.messages, p.hashed) end
  if #p.counted > 0 then each_chunk('HSET', p.refs, p.counted) end
  local scheduled = p.scheduled
  if #scheduled == 0 then return end
  local min_score, first = nil, nil
  for i = 1, #scheduled, 2 do
    local score = scheduled[i]
    if score == p.now_s then score = p.now end
    if min_score == nil or score < min_score then min_score, first = score, scheduled[i + 1] end
  end
  if p.parking then each_chunk('ZADD', p.parked, scheduled) end
  for g = 1, p.ngroups do
    schedule(p.due[g], p.channel[g], scheduled, min_score, first)
  end
end
