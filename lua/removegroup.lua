-- removegroup.lua: removes a consumer group from a topic, in steps: the first call takes it out
-- of the registered groups, so publishes stop going to it at once (publish_to refuses a view
-- that names a group that is not registered), and every call drops up to N of the messages it
-- still holds, due or leased, until none is left; then its keyed hash and paused flag go.
--
-- KEYS[1] groups    set     registered consumer groups
-- KEYS[2] messages  hash    field (see scripts.go) -> marshaled message
-- KEYS[3] refs      hash    field -> groups still holding it
-- KEYS[4] due       zset    the group's due set
-- KEYS[5] lease     zset    the group's lease set
-- KEYS[6] keyed     hash    the group's claimed keyed messages
-- KEYS[7] paused    string  the group's paused flag
-- KEYS[8] history   prefix  of the history keys of keyed messages
-- ARGV[1] the group's name
-- ARGV[2] N, the most messages to drop in this call
--
-- Returns {1 if this call unregistered the group else 0, messages dropped, messages left}.

local removed = redis.call('SREM', KEYS[1], ARGV[1])
local left = tonumber(ARGV[2])
local ids = {}
for _, set in ipairs({KEYS[4], KEYS[5]}) do
  if left > 0 then
    local members = redis.call('ZRANGEBYSCORE', set, '-inf', '(1e300', 'LIMIT', 0, left)
    if #members > 0 then
      each_chunk('ZREM', set, members)
      for _, m in ipairs(members) do ids[#ids + 1] = (split(m)) end
      left = left - #members
    end
  end
end
drop(KEYS[2], KEYS[3], ids, KEYS[8])
-- The lease set's marker (see scripts.go) is not a message: ZCOUNT below +inf leaves it out.
local remaining = redis.call('ZCARD', KEYS[4]) + redis.call('ZCOUNT', KEYS[5], '-inf', '(1e300')
if remaining == 0 then redis.call('DEL', KEYS[5], KEYS[6], KEYS[7]) end
return {removed, #ids, remaining}
