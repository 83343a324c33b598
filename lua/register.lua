-- register.lua: registers a consumer group on a topic. Registering a group that is already
-- registered writes nothing, so it works on a Redis that is full. The first group registered on
-- a topic takes over the messages published while the topic had no group (the parked set).
--
-- KEYS[1] groups  set   registered consumer groups
-- KEYS[2] parked  zset  messages waiting for a first group, members as in a single group's due
-- KEYS[3] due     zset  the group's due set
-- ARGV[1] group name
-- ARGV[2] the group's wake channel
--
-- Returns 0 when the group was registered already, 1 when it is now, 2 when it is now and took
-- over the parked messages.

if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then return 0 end
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
return adopted
