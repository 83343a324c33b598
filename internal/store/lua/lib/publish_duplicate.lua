-- fragment publish_duplicate; needs: locate, publish_debounce, publish_replace
-- duplicate_due finds where the keyed message with ID id is due, for a duplicate of it in
-- publish_to's call p: its earliest due time (Unix µs; nil when no group holds it due), and
-- the {group, member} pairs of the groups where it is due. A message this call stored is due
-- where the call schedules it (p.fresh); with no group, in the parked set.
local function duplicate_due(p, key, id)
  local fresh = p.fresh[key]
  if fresh then return p.scheduled[fresh], {} end
  if p.ngroups == 0 then return tonumber(redis.call('ZSCORE', p.parked, id .. ':0')), {} end
  local at, earliest = {}, nil
  for g = 1, p.ngroups do
    local where, m, s = locate(p.due[g], nil, p.keyed[g], id)
    if where then
      at[#at + 1] = {g, m}
      if earliest == nil or s < earliest then earliest = s end
    end
  end
  return earliest, at
end

-- publish_duplicate settles a message of publish_to's call p whose key is taken by the message
-- with the ID digits hex (see keys_find) and returns its outcome letter: d when the policy
-- keeps the existing message (k always; < and > when the new due time score, in Unix µs, is
-- not earlier, or later, than the existing message's; nothing is done once no group holds it
-- due), else r, replaced by publish_replace. max_wait (µs) is the new message's max wait, nil
-- for none (see publish_debounce).
local function publish_duplicate(p, policy, key, hex, data, score, max_wait)
  if policy == 'k' then return 'd' end
  local id = hex .. '=' .. key
  local earliest, at = duplicate_due(p, key, id)
  if earliest == nil then return 'd' end
  if policy == '>' then score = debounce_score(p, key, hex, score, max_wait) end
  if (policy == '<' and score >= earliest) or (policy == '>' and score <= earliest) then
    return 'd'
  end
  publish_replace(p, key, id, data, score, at)
  return 'r'
end
