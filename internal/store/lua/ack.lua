-- ack.lua: acknowledges messages a consumer finished: their leases go, and each stored message
-- goes once the last group has acknowledged it.
--
-- fragments: ack
-- KEYS[1] lease     zset    ID:attempt -> lease deadline (µs)
-- KEYS[2] messages  hash    field (see scripts.go) -> marshaled message
-- KEYS[3] refs      hash    field -> groups still holding it
-- KEYS[4] keyed     hash    the group's claimed keyed messages: key -> member
-- KEYS[5] history   prefix  of the history keys of keyed messages
-- ARGV[1] the group's name
-- ARGV[2] the outcome to record in the history of keyed messages: acked, or dead-lettered
--         when the message was moved to a dead-letter topic in another slot
-- ARGV[3] the dead-letter reason, or ""
-- ARGV[4] the group's epoch the leases were claimed in (see lease_marker in lib)
-- ARGV[5..] lease members (ID:attempt, the fencing tokens from the claims)
--
-- Returns the IDs whose ack was refused because their lease had been lost, or because the
-- group's lease set holds no lease of that epoch.

local members = {}
for i = 5, #ARGV do members[#members + 1] = ARGV[i] end
local group = {keyed = KEYS[4], history = KEYS[5], name = ARGV[1], epoch = ARGV[4]}
return ack(KEYS[1], KEYS[2], KEYS[3], group, members, ARGV[2], ARGV[3])
