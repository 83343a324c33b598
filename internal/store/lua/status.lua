-- status.lua: reports where each consumer group stands with the message that has a key. It
-- writes nothing.
--
-- fragments: split, locate
-- KEYS[1]              messages  hash    field (see scripts.go) -> marshaled message
-- KEYS[2]              parked    zset    messages waiting for a first group
-- KEYS[3]              history   prefix  of the history keys of keyed messages
-- KEYS[4..3+G]         due       zset    one per group in ARGV[3..2+G]
-- KEYS[4+G..3+2G]      lease     zset    same groups
-- KEYS[4+2G..3+3G]     keyed     hash    same groups
-- ARGV[1]              the key
-- ARGV[2]              G
-- ARGV[3..2+G]         group names
--
-- Returns {live, parked due µs or -1, then per group: state, time µs, attempt count, history
-- record or ""}: live is 1 while a message has the key. State d is due (time: its due time,
-- attempts so far), l leased in flight (time: the lease deadline, the attempt under way), h
-- finished as the history record says (time and attempt -1), f not held while the message
-- lives, n nothing known.

local key, ngroups = ARGV[1], tonumber(ARGV[2])
local existing = redis.call('HGET', KEYS[1], '=' .. key)
local records = {}
local h = KEYS[3] .. key
if redis.call('EXISTS', h) == 1 then
  for g = 1, ngroups do records[g] = redis.call('HGET', h, ARGV[2 + g]) end
end
local result = {0, -1}
local id = nil
if existing then
  result[1] = 1
  id = string.sub(existing, 1, 12) .. '=' .. key
  local p = redis.call('ZSCORE', KEYS[2], id .. ':0')
  if p then result[2] = tonumber(p) end
end
for g = 1, ngroups do
  local where, m, score = nil, nil, nil
  if id then where, m, score = locate(KEYS[3 + g], KEYS[3 + ngroups + g], KEYS[3 + 2 * ngroups + g], id) end
  if where then
    local _, attempt = split(m)
    for _, v in ipairs({where == 'due' and 'd' or 'l', score, attempt, ''}) do result[#result + 1] = v end
  elseif records[g] then
    for _, v in ipairs({'h', -1, -1, records[g]}) do result[#result + 1] = v end
  else
    for _, v in ipairs({id and 'f' or 'n', -1, -1, ''}) do result[#result + 1] = v end
  end
end
return result
