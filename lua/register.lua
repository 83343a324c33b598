-- register.lua: registers a consumer group on a topic and returns the group's registration, its
-- epoch: an ID drawn from the topic's ID counter when the group is registered anew, kept while
-- it stays registered. A subscription names the epoch in every claim (claim.lua), so that once
-- the group is removed (removegroup.lua deletes the epoch) the subscription stops instead of
-- claiming for a group that a later registration started afresh. Registering a group that is
-- already registered writes nothing, so it works on a Redis that is full; only a group
-- registered before epochs existed gets one then. The first group registered on a topic takes
-- over the messages published while the topic had no group (the parked set).
--
-- KEYS[1] groups  set     registered consumer groups
-- KEYS[2] parked  zset    messages waiting for a first group, members as in a single group's due
-- KEYS[3] due     zset    the group's due set
-- KEYS[4] seq     string  the topic's ID counter
-- KEYS[5] epoch   string  the group's epoch
-- ARGV[1] group name
-- ARGV[2] the group's wake channel
--
-- Returns {0 when the group was registered already, 1 when it is now, 2 when it is now and took
-- over the parked messages; the epoch}.

local function new_epoch()
  local epoch = string.format('%012x', redis.call('INCR', KEYS[4]))
  redis.call('SET', KEYS[5], epoch)
  return epoch
end

if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then
  return {0, redis.call('GET', KEYS[5]) or new_epoch()}
end
local adopted = 1
if redis.call('SCARD', KEYS[1]) == 0 and redis.call('EXISTS', KEYS[2]) == 1 then
  if redis.call('EXISTS', KEYS[3]) == 1 then
    redis.call('ZUNIONSTORE', KEYS[3], 2, KEYS[3], KEYS[2])
    redis.call('DEL', KEYS[2])
  else
    redis.call('RENAME', KEYS[2], KEYS[3])
  end
  wake(ARGV[2], nil, head(KEYS[3]))
  adopted = 2
end
redis.call('SADD', KEYS[1], ARGV[1])
return {adopted, new_epoch()}
