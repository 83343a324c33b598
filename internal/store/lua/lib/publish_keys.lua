-- fragment publish_keys; needs: hmget, exists_count
-- keys_find reads, once per call, what the keyed messages of publish_to's call p need to know
-- of their keys: one HMGET of their fields in the messages hash into p.taken (key -> the 12 hex
-- digits of the message that holds it, false when free) and one EXISTS of the history keys of
-- the free ones into p.past (key -> whether its history exists; nil while unknown: some of them
-- exist, and publish_keyed asks for the key's own). The call keeps both tables up to date as it
-- writes (a key it stores is taken from then on), so that a message sees an earlier one of the
-- same call exactly as if that one had been written already.
local function keys_find(p)
  local keys, seen = {}, {}
  for i = 0, p.count - 1 do
    local spec = ARGV[p.first + 3 * i + 2]
    if spec ~= '' and string.sub(spec, 1, 1) ~= 'B' then
      local key = string.sub(spec, string.find(spec, '=', 2, true) + 1)
      if not seen[key] then seen[key], keys[#keys + 1] = true, key end
    end
  end
  local fields, free, histories = {}, {}, {}
  for i, key in ipairs(keys) do fields[i] = '=' .. key end
  p.taken, p.past = {}, {}
  for i, value in ipairs(hmget(p.messages, fields)) do
    local key = keys[i]
    p.taken[key] = value and string.sub(value, 1, 12)
    if not value then free[#free + 1], histories[#histories + 1] = key, p.history .. key end
  end
  if #free == 0 then return end
  local n = exists_count(histories)
  if n ~= 0 and n ~= #free then return end
  for _, key in ipairs(free) do p.past[key] = n ~= 0 end
end
