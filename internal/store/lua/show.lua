-- show.lua: one message of a consumer group by its member name (see scripts.go), or by the
-- short form of a member that holds its message ("ID|", see list.lua) and its score; failing
-- the due and lease sets, in the group's compact tier by its due time.
--
-- fragments: now_us, split, stored, position, far_find
-- KEYS[1] due       zset  the group's due set (or a parked set)
-- KEYS[2] lease     zset  the group's lease set (or the parked set again)
-- KEYS[3] messages  hash  field (see scripts.go) -> marshaled message
-- KEYS[4] far       zset  the group's compact tier index (or the parked set again)
-- ARGV[1] the member, or its short form
-- ARGV[2] "" for a member, the score (µs) for a short form
-- ARGV[3] the due time (µs) to look for the member at in the compact tier (see far_find), or ""
--
-- Returns {now µs, "due", "lease" or "far", score µs, marshaled message or false, member}, or
-- {now µs} when the group holds no such member.

local now = now_us()
local m, where, score = ARGV[1], 'due', nil
if ARGV[2] ~= '' then m = find_short(KEYS[1], ARGV[2], m) end
if m then
  score = redis.call('ZSCORE', KEYS[1], m)
  if not score then where, score = 'lease', redis.call('ZSCORE', KEYS[2], m) end
end
if not score and ARGV[3] ~= '' then
  m = far_find(KEYS[4], ARGV[3], ARGV[1])
  if m then where, score = 'far', ARGV[3] end
end
if not score then return {now} end
local id, _, message = split(m)
return {now, where, tonumber(score), message or stored(KEYS[3], {id})[1] or false, m}
