-- ack.lua: acknowledges messages a consumer finished: their leases go, and each stored message
-- goes once the last group has acknowledged it.
--
-- KEYS[1] lease     zset  ID -> lease deadline (µs)
-- KEYS[2] attempts  hash  ID -> attempts so far
-- KEYS[3] messages  hash  ID -> marshaled message
-- KEYS[4] refs      hash  ID -> groups still holding it
-- ARGV    pairs: ID, attempt (the fencing token from the claim)
--
-- Returns the IDs whose ack was refused because their lease had been lost.

local refused = {}
for i = 1, #ARGV, 2 do
  local id, attempt = ARGV[i], ARGV[i + 1]
  if holds(KEYS[1], KEYS[2], id, attempt) then
    finish(KEYS[1], KEYS[2], KEYS[3], KEYS[4], id)
  else
    table.insert(refused, id)
  end
end
return refused
