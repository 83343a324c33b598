-- ack.lua: acknowledges messages a consumer finished: their leases go, and each stored message
-- goes once the last group has acknowledged it.
--
-- KEYS[1] lease     zset  ID:attempt -> lease deadline (µs)
-- KEYS[2] messages  hash  ID -> marshaled message
-- KEYS[3] refs      hash  ID -> groups still holding it
-- ARGV    lease members (ID:attempt, the fencing tokens from the claims)
--
-- Returns the IDs whose ack was refused because their lease had been lost.

local members = {}
for i = 1, #ARGV do members[i] = ARGV[i] end
return ack(KEYS[1], KEYS[2], KEYS[3], members)
