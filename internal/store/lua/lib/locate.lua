-- fragment locate; needs: split
-- locate finds the member under which a consumer group holds the keyed message with ID `id`
-- (12 hex digits, "=" and the key): the group's keyed hash names it once the group claimed
-- the message (an entry naming an older message with the key does not count), else it is
-- the never-claimed ID:0. Returns 'due' or 'lease', the member and its score (µs), or nil
-- when the group does not hold the message. lease may be nil to look at the due set only.
local function locate(due, lease, keyed, id)
  local m = redis.call('HGET', keyed, string.sub(id, 14))
  if not m or split(m) ~= id then m = id .. ':0' end
  local score = redis.call('ZSCORE', due, m)
  if score then return 'due', m, tonumber(score) end
  if lease then
    score = redis.call('ZSCORE', lease, m)
    if score then return 'lease', m, tonumber(score) end
  end
  return nil
end
