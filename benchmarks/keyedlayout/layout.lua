-- layout.lua: the Redis memory of a scheduled message in candidate layouts, written straight
-- into a scratch redis-server with no redisdelay code, to weigh a layout before building it
-- (issue 37: keyed messages at most 64 B beyond the payload). Run it as probe.sh does.
--
-- ARGV[1] layout:
--   unkeyed   the one-group due member "ID|message" (what redisdelay writes)
--   keyed     the one-group keyed message as redisdelay writes it: due member "ID=key:0", and
--             the messages hash's field "=key" holding the ID's hex digits and the message
--   embedded  a candidate: due member "ID=key|message", and a by-key index of nb small hashes
--             (listpack-encoded while under hash-max-listpack-entries and -value), key ->
--             the ID (6 bytes) and the due time (8 bytes), binary
-- ARGV[2] messages, ARGV[3] bytes of message, ARGV[4] index hashes (embedded only)
local layout, n, size, nb = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4] or '1')
local message = string.rep('x', size)
local base = 1764000000000000
for i = 1, n do
  local hex = string.format('%012x', 1000000 + i)
  local key = string.format('order-%010d', i)
  local due = base + i * 37
  if layout == 'unkeyed' then
    redis.call('ZADD', 'due', string.format('%d', due), hex .. '|' .. message)
  elseif layout == 'keyed' then
    redis.call('ZADD', 'due', string.format('%d', due), hex .. '=' .. key .. ':0')
    redis.call('HSET', 'messages', '=' .. key, hex .. message)
  elseif layout == 'embedded' then
    redis.call('ZADD', 'due', string.format('%d', due), hex .. '=' .. key .. '|' .. message)
    redis.call('HSET', 'index:' .. (i % nb), key, struct.pack('>I6d', 1000000 + i, due))
  else
    return redis.error_reply('unknown layout ' .. layout)
  end
end
return n
