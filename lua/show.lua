-- show.lua: one message of a consumer group by its member name (see scripts.go).
--
-- KEYS[1] due       zset  the group's due set (or a parked set)
-- KEYS[2] lease     zset  the group's lease set
-- KEYS[3] messages  hash  field (see scripts.go) -> marshaled message
-- ARGV[1] the member
--
-- Returns {now µs, "due" or "lease", score µs, marshaled message or false}, or {now µs} when
-- the group holds no such member.

local now = now_us()
local m = ARGV[1]
local where, score = 'due', redis.call('ZSCORE', KEYS[1], m)
if not score then where, score = 'lease', redis.call('ZSCORE', KEYS[2], m) end
if not score then return {now} end
local id, _, message = split(m)
return {now, where, tonumber(score), message or stored(KEYS[3], {id})[1] or false}
