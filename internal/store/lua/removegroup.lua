-- removegroup.lua: removes a consumer group from a topic, in steps. The first step (ARGV[3]
-- remove) takes the group out of the registered groups, so publishes stop going to it at once
-- (publish_to refuses a view that names a group that is not registered), deletes its epoch
-- (claims of its running subscriptions are refused from then on, see claim.lua), its paused
-- flag and its keyed hash, and renames its due and lease sets to the removal's own keys. So a
-- group registered again while the removal runs starts empty and is left alone by the later
-- steps. Every step (ARGV[3] drain) drops up to N of the messages the removal holds, each stored
-- message once no other group holds it, until none is left.
--
-- fragments: split, each_chunk, far, drop, close_batch, wake, drop_parked, move_set
-- KEYS[1]  groups    set     registered consumer groups
-- KEYS[2]  messages  hash    field (see scripts.go) -> marshaled message
-- KEYS[3]  refs      hash    field -> groups still holding it
-- KEYS[4]  due       zset    the group's due set
-- KEYS[5]  lease     zset    the group's lease set
-- KEYS[6]  keyed     hash    the group's claimed keyed messages
-- KEYS[7]  paused    string  the group's paused flag
-- KEYS[8]  history   prefix  of the history keys of keyed messages
-- KEYS[9]  epoch     string  the group's registration (see register.lua)
-- KEYS[10] rdue      zset    the removal's due set
-- KEYS[11] rlease    zset    the removal's lease set
-- KEYS[12] batches   hash    batch key -> its open batch (see publish_batch)
-- KEYS[13] parked    zset    the topic's parked set
-- KEYS[14] window    hash    the topic's new-group window (see register.lua)
-- KEYS[15] rparked   zset    the parked set as the removal of the topic's last group left it
-- KEYS[16] far       zset    the group's compact-tier index, and the prefix of its buckets
--                            (see far in lib): the first step moves the index to rfar and
--                            deletes the count; the buckets keep their names (their members
--                            carry the group's epoch, so a group registered again writes others)
-- KEYS[17] rfar      zset    the removal's compact-tier index
-- ARGV[1] the group's name
-- ARGV[2] N, the most messages to drop in this call
-- ARGV[3] remove (the first step) or drain
-- ARGV[4] the group's wake channel: the first step wakes its sleeping subscriptions, so they
--         claim, are refused, and stop at once
--
-- Returns {1 if this call unregistered the group else 0, messages dropped, messages left (a
-- bucket of the compact tier left counts as one)}.

local removed = 0
if ARGV[3] == 'remove' and redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then
  redis.call('SREM', KEYS[1], ARGV[1])
  redis.call('DEL', KEYS[9], KEYS[7], KEYS[6])
  -- Into the removal's own sets; merged there when an earlier removal is unfinished, whose
  -- messages this one takes over.
  move_set(KEYS[4], KEYS[10])
  move_set(KEYS[5], KEYS[11])
  move_set(KEYS[16], KEYS[17])
  redis.call('DEL', KEYS[16] .. ':n')
  -- With no group left, the parked set holds only what the new-group window kept (messages
  -- parked before the first group were copied to it then): its groups are gone, so it goes
  -- with them, and a group that registers next starts with what is published from now on.
  if redis.call('SCARD', KEYS[1]) == 0 then
    redis.call('DEL', KEYS[14])
    move_set(KEYS[13], KEYS[15])
  end
  wake(ARGV[4], nil, 0)
  removed = 1
end
local left = tonumber(ARGV[2])
local ids = {}
for _, set in ipairs({KEYS[10], KEYS[11]}) do
  if left > 0 then
    local members = redis.call('ZRANGEBYSCORE', set, '-inf', '(1e300', 'LIMIT', 0, left)
    if #members > 0 then
      each_chunk('ZREM', set, members)
      for _, m in ipairs(members) do ids[#ids + 1] = (split(m)) end
      left = left - #members
    end
  end
end
-- Then the compact tier's buckets, one after another.
left = left - far_drain(KEYS[17], KEYS[16], '-inf', left, ids)
for _, id in ipairs(ids) do close_batch(KEYS[12], KEYS[2], id) end
drop(KEYS[2], KEYS[3], ids, KEYS[8])
-- What the window kept is not the group's: it is dropped in the same budget, but not counted.
if left > 0 then drop_parked(KEYS[15], KEYS[2], KEYS[3], KEYS[8], left) end
-- The lease set's marker (see scripts.go) is not a message: ZCOUNT below +inf leaves it out.
-- A bucket left counts as one message: how many it holds would take a read per bucket.
local remaining = redis.call('ZCARD', KEYS[10]) + redis.call('ZCOUNT', KEYS[11], '-inf', '(1e300') + redis.call('ZCARD', KEYS[15]) + redis.call('ZCARD', KEYS[17])
if remaining == 0 then redis.call('DEL', KEYS[10], KEYS[11], KEYS[15]) end
return {removed, #ids, remaining}
