-- show.lua: one message of a consumer group by its member name (see scripts.go), or by the
-- short form of a member that holds its message ("ID|", see list.lua) and its score.
--
-- fragments: now_us, split, stored, position
-- KEYS[1] due       zset  the group's due set (or a parked set)
-- KEYS[2] lease     zset  the group's lease set (or the parked set again)
-- KEYS[3] messages  hash  field (see scripts.go) -> marshaled message
-- ARGV[1] the member, or its short form
-- ARGV[2] "" for a member, the score (µs) for a short form
--
-- Returns {now µs, "due" or "lease", score µs, marshaled message or false, member}, or {now µs}
-- when the group holds no such member.

local now = now_us()
local m = ARGV[1]
if ARGV[2] ~= '' then
  m = find_short(KEYS[1], ARGV[2], m)
  if not m then return {now} end
end
local where, score = 'due', redis.call('ZSCORE', KEYS[1], m)
if not score then where, score = 'lease', redis.call('ZSCORE', KEYS[2], m) end
if not score then return {now} end
local id, _, message = split(m)
return {now, where, tonumber(score), message or stored(KEYS[3], {id})[1] or false, m}
