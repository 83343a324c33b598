-- closewindow.lua: drops what a topic's new-group window left in the parked set once the window
-- has closed (see register.lua), up to N members per call: each message no group holds any
-- longer is deleted. It drops nothing while the window is open, or while no group is
-- registered (the parked set then waits for a first group).
--
-- fragments: drop_parked
-- KEYS[1] groups    set     registered consumer groups
-- KEYS[2] parked    zset    messages waiting for a first group or kept by the window
-- KEYS[3] window    hash    exists while the new-group window is open
-- KEYS[4] messages  hash    field (see scripts.go) -> marshaled message
-- KEYS[5] refs      hash    field -> holders of the message, while more than one
-- KEYS[6] history   prefix  of the history keys of keyed messages
-- ARGV[1] N, the most members to drop in this call
--
-- Returns {members left to drop, ms left of the window or -1 when it is closed}.

local left = redis.call('PTTL', KEYS[3])
if left >= 0 then return {redis.call('ZCARD', KEYS[2]), left} end
if redis.call('SCARD', KEYS[1]) == 0 then return {0, -1} end
return {drop_parked(KEYS[2], KEYS[4], KEYS[5], KEYS[6], tonumber(ARGV[1])), -1}
