-- fragment exists_count; needs: each_chunk
-- exists_count returns how many of the given keys exist: one EXISTS for all of them (in chunks
-- of CHUNK), so that a call checks the history keys of k messages with one command, and looks
-- at each only when some exist. A key given twice counts twice.
local function exists_count(keys)
  local n = 0
  for i = 1, #keys, CHUNK do
    n = n + redis.call('EXISTS', unpack(keys, i, math.min(i + CHUNK - 1, #keys)))
  end
  return n
end
