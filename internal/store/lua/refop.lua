-- refop.lua: cancels or reschedules one message of one consumer group, named by its member (see
-- scripts.go): the Inspector's operations by reference, for messages with or without a key.
-- Cancelling a message in flight removes its lease, as cancel.lua does; rescheduling leaves it.
-- A batch that is still open (see publish_batch) and is cancelled or rescheduled is closed: later
-- items of its batch key open a new batch instead of joining one whose delivery has moved on.
-- A group that is not registered (removed, perhaps since the caller looked) is refused before
-- any write, so that no write for it leaves orphans.
--
-- fragments: int, now_us, split, schedule, drop, ended, close_batch
-- KEYS[1] call      string  this call's token: holds the reply once the call ran
-- KEYS[2] due       zset    the group's due set
-- KEYS[3] lease     zset    the group's lease set
-- KEYS[4] messages  hash    field (see scripts.go) -> marshaled message
-- KEYS[5] refs      hash    field -> groups still holding it
-- KEYS[6] keyed     hash    the group's claimed keyed messages
-- KEYS[7] history   prefix  of the history keys of keyed messages
-- KEYS[8] groups    set     registered consumer groups
-- KEYS[9] batches   hash    batch key -> "hex count bytes due" of its open batch
-- ARGV[1] how long the call key is kept, ms
-- ARGV[2] cancel or reschedule
-- ARGV[3] the member
-- ARGV[4] the group's name
-- ARGV[5] reschedule: the new due time, a delay in µs after now or "@" and Unix µs
-- ARGV[6] reschedule: the group's wake channel
--
-- Returns {state, due µs or -1}: state d done, i in flight (cancelled, or left alone by a
-- reschedule), n the group holds no such member, g the group is not registered (nothing
-- written, not even the call key).

local done = redis.call('GET', KEYS[1])
if done then
  local space = string.find(done, ' ', 1, true)
  return {string.sub(done, 1, space - 1), tonumber(string.sub(done, space + 1))}
end
if redis.call('SISMEMBER', KEYS[8], ARGV[4]) == 0 then return {'g', -1} end
local now = now_us()
local m = ARGV[3]
local id, attempt = split(m)
local reply, due = 'n', -1
if attempt ~= nil then
  local where = 'due'
  if not redis.call('ZSCORE', KEYS[2], m) then
    where = 'lease'
    if not redis.call('ZSCORE', KEYS[3], m) then where = nil end
  end
  if where and ARGV[2] == 'cancel' then
    redis.call('ZREM', where == 'due' and KEYS[2] or KEYS[3], m)
    ended({keyed = KEYS[6], history = KEYS[7], name = ARGV[4]}, id, attempt, 'cancelled', '', now)
    close_batch(KEYS[9], KEYS[4], id)
    drop(KEYS[4], KEYS[5], {id}, KEYS[7])
    reply = where == 'due' and 'd' or 'i'
  elseif where == 'due' then
    local schedule_arg = ARGV[5]
    if string.sub(schedule_arg, 1, 1) == '@' then
      due = math.max(tonumber(string.sub(schedule_arg, 2)), now)
    else
      due = now + math.max(tonumber(schedule_arg), 0)
    end
    schedule(KEYS[2], ARGV[6], {due, m}, due, m)
    close_batch(KEYS[9], KEYS[4], id)
    reply = 'd'
  elseif where == 'lease' then
    reply = 'i'
  end
end
redis.call('SET', KEYS[1], reply .. ' ' .. int(due), 'PX', ARGV[1])
return {reply, due}
