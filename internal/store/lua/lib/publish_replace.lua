-- fragment publish_replace; needs: schedule
-- publish_replace writes data in place of the keyed message with ID id (its hex digits, "="
-- and key) for publish_to's call p, due at score (Unix µs) from now on: in the groups where it
-- is due (at: {group, member} pairs, see duplicate_due) and in the parked set; a message this
-- call stored gets its new score where the call schedules it. Groups that hold it in flight
-- see the new message on their next attempt. The window's copy, if the message has one (see
-- publish_window), is replaced too. The fields go with the call's other writes (p.hashed, see
-- publish_flush): a later field of the same name there wins.
local function publish_replace(p, key, id, data, score, at)
  local hex, fresh, copy = string.sub(id, 1, 12), p.fresh[key], p.copies[key]
  if not fresh and p.parking and p.ngroups > 0 then copy = redis.call('ZSCORE', p.parked, id .. ':0') end
  local hashed = p.hashed
  hashed[#hashed + 1] = '=' .. key
  hashed[#hashed + 1] = hex .. data
  if copy then
    hashed[#hashed + 1] = hex
    hashed[#hashed + 1] = data
  end
  if fresh then
    p.scheduled[fresh] = score
    return
  end
  for _, g in ipairs(at) do
    schedule(p.due[g[1]], p.channel[g[1]], {score, g[2]}, score, g[2])
  end
  if p.parking then redis.call('ZADD', p.parked, 'XX', score, id .. ':0') end
end
