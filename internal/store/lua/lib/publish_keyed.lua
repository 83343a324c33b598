-- fragment publish_keyed; needs: publish_keys, publish_debounce, publish_duplicate
-- A keyed message is never embedded: it lives in the messages hash under "=" and its key, its
-- ID's 12 hex digits before the marshaled message, so that the key finds it. Its ID is the hex
-- digits, "=" and the key. While the field exists the key is taken, and while its history key
-- exists (for the retention after the message is done) too: a message with a taken key is a
-- duplicate, or replaces the message where the policy says so (publish_duplicate). A call
-- reads its keys once (keys_find) and writes their fields with its other messages
-- (publish_flush).

-- publish_keyed stores the keyed message with ID id (12 hex digits), data, due time score
-- (Unix µs) and key spec `spec` of publish_to's call p, and returns its outcome letter (see
-- publish_to). A message whose key is taken is a duplicate; else it is stored, with the
-- window's copy while the window is open (see publish_window), its history key when it has a
-- retention and its debounce cap when it has a max wait (see publish_debounce), and
-- p.fresh[key] is the index of its score in p.scheduled.
local function publish_keyed(p, spec, id, data, score)
  local policy = string.sub(spec, 1, 1)
  local eq = string.find(spec, '=', 2, true)
  local retention, max_wait = string.match(string.sub(spec, 2, eq - 1), '^(%d+)/?(%d*)$')
  retention, max_wait = tonumber(retention), policy == '>' and tonumber(max_wait) or nil
  local key = string.sub(spec, eq + 1)
  if not p.taken then keys_find(p) end
  local taken = p.taken[key]
  if taken then return publish_duplicate(p, policy, key, taken, data, score, max_wait) end
  if p.past[key] == nil then p.past[key] = redis.call('EXISTS', p.history .. key) == 1 end
  if p.past[key] then return 'd' end
  local holders, hashed = p.holders, p.hashed
  hashed[#hashed + 1] = '=' .. key
  hashed[#hashed + 1] = id .. data
  if p.parking and p.ngroups > 0 then
    -- The window's copy, under the plain ID: it never holds the key (see publish_window).
    hashed[#hashed + 1] = id
    hashed[#hashed + 1] = data
    holders, p.copies[key] = p.ngroups, true
  end
  p.taken[key] = id
  if holders > 1 then
    local counted = p.counted
    counted[#counted + 1] = '=' .. key
    counted[#counted + 1] = holders
  end
  if retention > 0 then redis.call('HSET', p.history .. key, '', retention) end
  if max_wait then score = math.min(score, debounce_cap(p, key, id, p.now + max_wait, max_wait)) end
  local scheduled = p.scheduled
  scheduled[#scheduled + 1] = score
  p.fresh[key] = #scheduled
  scheduled[#scheduled + 1] = id .. '=' .. key .. ':0'
  return 's'
end
