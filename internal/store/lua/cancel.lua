-- cancel.lua: cancels the message with a key: every consumer group that holds it due loses it,
-- and a group that holds it in flight loses its lease, so the delivery under way finishes but
-- neither its Nack nor its expired lease brings the message back (its Ack and Nack are
-- refused as for a lost lease). The message goes once no group holds it, and the key is free
-- again, or kept for its history's retention.
--
-- fragments: now_us, split, locate, drop, ended, stale
-- KEYS[1]              call      string  this call's token: holds the reply once the call ran
-- KEYS[2]              messages  hash    field (see scripts.go) -> marshaled message
-- KEYS[3]              refs      hash    field -> groups still holding it
-- KEYS[4]              groups    set     registered consumer groups
-- KEYS[5]              parked    zset    messages waiting for a first group
-- KEYS[6]              history   prefix  of the history keys of keyed messages
-- KEYS[7..6+G]         due       zset    one per group in ARGV[4..3+G]
-- KEYS[7+G..6+2G]      lease     zset    same groups
-- KEYS[7+2G..6+3G]     keyed     hash    same groups
-- ARGV[1]              how long the call key is kept, ms
-- ARGV[2]              the key
-- ARGV[3]              G, the number of groups the caller believes are registered
-- ARGV[4..3+G]         group names
--
-- Returns {1, states}: one letter for the parked set (c cancelled there, - not there), then
-- one per group: c cancelled while due, i cancelled while in flight, f not held (the group was
-- done with it, or registered after it was published; for every group when the message is gone
-- but its history is kept), n no message has the key. Returns
-- {0, group...} when the caller's view of the groups is stale; nothing is written then.

local key, ngroups = ARGV[2], tonumber(ARGV[3])
local done = redis.call('GET', KEYS[1])
if done then return {1, done} end
local wrong = stale(KEYS[4], 4, ngroups)
if wrong then return wrong end

local states = {}
local existing = redis.call('HGET', KEYS[2], '=' .. key)
if not existing then
  local gone = 'n'
  if redis.call('EXISTS', KEYS[6] .. key) == 1 then gone = 'f' end
  local reply = '-' .. string.rep(gone, ngroups)
  redis.call('SET', KEYS[1], reply, 'PX', ARGV[1])
  return {1, reply}
end
local id = string.sub(existing, 1, 12) .. '=' .. key
local now = now_us()
local holds = {}
if redis.call('ZREM', KEYS[5], id .. ':0') == 1 then
  states[1] = 'c'
  -- With a group registered, the parked set is the new-group window, whose copy is under the
  -- plain ID (see publish_window); a copy parked by a version that held the key has none.
  local copy = window_id(id)
  if ngroups > 0 and redis.call('HEXISTS', KEYS[2], copy) == 1 then
    holds[#holds + 1] = copy
  else
    holds[#holds + 1] = id
  end
else
  states[1] = '-'
end
for g = 1, ngroups do
  local due, lease = KEYS[6 + g], KEYS[6 + ngroups + g]
  local group = {keyed = KEYS[6 + 2 * ngroups + g], history = KEYS[6], name = ARGV[3 + g]}
  local where, m = locate(due, lease, group.keyed, id)
  if where then
    redis.call('ZREM', where == 'due' and due or lease, m)
    local _, attempt = split(m)
    ended(group, id, attempt, 'cancelled', '', now)
    holds[#holds + 1] = id
    states[#states + 1] = where == 'due' and 'c' or 'i'
  else
    states[#states + 1] = 'f'
  end
end
for _, held_id in ipairs(holds) do drop(KEYS[2], KEYS[3], {held_id}, KEYS[6]) end
local reply = table.concat(states)
redis.call('SET', KEYS[1], reply, 'PX', ARGV[1])
return {1, reply}
