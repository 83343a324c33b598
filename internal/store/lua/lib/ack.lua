-- fragment ack; needs: split, each_chunk, held, drop, ended, now_us
-- ack acknowledges the leases `members` of a group: their leases go, the group's hold on each
-- message ends (see drop), and keyed ones are recorded with outcome and reason, all of them
-- at once (see ended_all).
-- With group.epoch, the leases are the ones that registration epoch's claims gave (see held).
-- Returns the IDs whose lease had been lost; nothing changes for those.
local function ack(lease, messages, refs, group, members, outcome, reason)
  local leased = held(lease, members, group.epoch)
  local done, ids, refused, keys, attempts = {}, {}, {}, {}, {}
  for _, m in ipairs(members) do
    -- A plain ID's member (12 hex digits, ":", its attempt count) needs no attempt count here,
    -- only a keyed one does (see ended_all): two string calls rather than split's four, each
    -- about 800 Redis instructions per acked message.
    local id, attempt = nil, nil
    if string.byte(m, 13) == 58 then
      id = string.sub(m, 1, 12)
    else
      id, attempt = split(m)
    end
    if leased[m] then
      done[#done + 1] = m
      ids[#ids + 1] = id
      local key = key_of(id)
      if key then keys[#keys + 1], attempts[#attempts + 1] = key, attempt end
    else
      refused[#refused + 1] = id
    end
  end
  if #done > 0 then each_chunk('ZREM', lease, done) end
  local kept = nil
  if #keys > 0 then kept = ended_all(group, keys, attempts, outcome, reason, now_us()) end
  drop(messages, refs, ids, group.history, kept)
  return refused
end
