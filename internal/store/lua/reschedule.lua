-- reschedule.lua: gives the message with a key a new due time, earlier or later, in every
-- consumer group that holds it due (a message waiting for a retry included), keeping its
-- attempt count. Groups whose subscribers sleep past the new time are woken. A group that
-- holds the message in flight keeps it as it is.
--
-- fragments: int, now_us, locate, schedule, stale
-- KEYS[1]              call      string  this call's token: holds the reply once the call ran
-- KEYS[2]              messages  hash    field (see scripts.go) -> marshaled message
-- KEYS[3]              groups    set     registered consumer groups
-- KEYS[4]              parked    zset    messages waiting for a first group
-- KEYS[5]              history   prefix  of the history keys of keyed messages
-- KEYS[6..5+G]         due       zset    one per group in ARGV[5..4+G]
-- KEYS[6+G..5+2G]      lease     zset    same groups
-- KEYS[6+2G..5+3G]     keyed     hash    same groups
-- ARGV[1]              how long the call key is kept, ms
-- ARGV[2]              the key
-- ARGV[3]              the new due time: a delay in µs after the Redis clock now, or "@" and a
--                      Unix time in µs (due at once if already past)
-- ARGV[4]              G, the number of groups the caller believes are registered
-- ARGV[5..4+G]         group names
-- ARGV[5+G..4+2G]      wake channels of those groups
--
-- Returns {1, states, due µs}: states as in cancel.lua with r (rescheduled) for c and i for in
-- flight (unchanged), or {0, group...} when the view of the groups is stale (nothing written).

local key, ngroups = ARGV[2], tonumber(ARGV[4])
local done = redis.call('GET', KEYS[1])
if done then
  local space = string.find(done, ' ', 1, true)
  return {1, string.sub(done, 1, space - 1), tonumber(string.sub(done, space + 1))}
end
local wrong = stale(KEYS[3], 5, ngroups)
if wrong then return wrong end

local now = now_us()
local score
if string.sub(ARGV[3], 1, 1) == '@' then
  score = math.max(tonumber(string.sub(ARGV[3], 2)), now)
else
  score = now + math.max(tonumber(ARGV[3]), 0)
end
local states = {}
local existing = redis.call('HGET', KEYS[2], '=' .. key)
if not existing then
  local gone = 'n'
  if redis.call('EXISTS', KEYS[5] .. key) == 1 then gone = 'f' end
  states = {'-', string.rep(gone, ngroups)}
else
  local id = string.sub(existing, 1, 12) .. '=' .. key
  if redis.call('ZADD', KEYS[4], 'XX', 'CH', score, id .. ':0') == 1 or redis.call('ZSCORE', KEYS[4], id .. ':0') then
    states[1] = 'r'
  else
    states[1] = '-'
  end
  for g = 1, ngroups do
    local due = KEYS[5 + g]
    local where, m = locate(due, KEYS[5 + ngroups + g], KEYS[5 + 2 * ngroups + g], id)
    if where == 'due' then
      schedule(due, ARGV[4 + ngroups + g], {score, m}, score, m)
      states[#states + 1] = 'r'
    elseif where == 'lease' then
      states[#states + 1] = 'i'
    else
      states[#states + 1] = 'f'
    end
  end
end
local reply = table.concat(states)
redis.call('SET', KEYS[1], reply .. ' ' .. int(score), 'PX', ARGV[1])
return {1, reply, score}
