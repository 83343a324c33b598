-- copy.lua: what the new-group window's copy of a publish call's messages costs Redis, written
-- straight into a scratch redis-server with no redisdelay code, to weigh a layout of the
-- window before building it (issue 37: Redis CPU per message at most 0.9x of ae81ee4 with the
-- window open). Run it as probe.sh does: one call per publish call, its messages as ARGV.
--
-- Every layout first builds what publish_to's plain path has at hand when it parks a call (the
-- pairs of due time and member "ID|message" it adds to the due set), then:
--   none     writes nothing: the baseline that the others are measured against
--   zset     the window as stored: the pairs also go to the parked set (ZADD), after an HGET of
--            the window's cap and a ZCARD of the set
--   packed   a candidate: one list element per call (RPUSH), the call's pairs joined with their
--            lengths, after an HINCRBY of the window's message count that also returns it
--   struct   a candidate: packed as one list element per call like packed, but by one
--            struct.pack of the members with 2-byte lengths, after the same HINCRBY
--   list     a candidate: one RPUSH per call of a header element (the call's due time and
--            count) and its members, each an element of its own, after the same HINCRBY
-- ARGV[1] layout, ARGV[2] the call's first ID (a number), ARGV[3] due time (Unix us), then the
-- marshaled messages.
local layout, first, due = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local scheduled, n = {}, 0
for i = 4, #ARGV do
  scheduled[n + 1] = due
  scheduled[n + 2] = string.format('%012x', first + i - 4) .. '|' .. ARGV[i]
  n = n + 2
end
if layout == 'zset' then
  local cap = redis.call('HGET', 'window', '')
  if redis.call('ZCARD', 'parked') + n / 2 <= tonumber(cap) then
    redis.call('ZADD', 'parked', unpack(scheduled))
  end
elseif layout == 'packed' then
  if redis.call('HINCRBY', 'window', 'n', n / 2) <= 10000 then
    local parts = {}
    for i = 2, n, 2 do
      parts[#parts + 1] = string.format('%d:', #scheduled[i])
      parts[#parts + 1] = scheduled[i]
    end
    redis.call('RPUSH', 'log', due .. ' ' .. table.concat(parts))
  end
elseif layout == 'struct' then
  if redis.call('HINCRBY', 'window', 'n', n / 2) <= 10000 then
    local args = {}
    for i = 2, n, 2 do
      args[i - 1] = #scheduled[i]
      args[i] = scheduled[i]
    end
    redis.call('RPUSH', 'log', struct.pack('>c0' .. string.rep('I2c0', n / 2), due, unpack(args)))
  end
elseif layout == 'list' then
  if redis.call('HINCRBY', 'window', 'n', n / 2) <= 10000 then
    local elements = {due .. ' ' .. (n / 2)}
    for i = 2, n, 2 do elements[#elements + 1] = scheduled[i] end
    redis.call('RPUSH', 'log', unpack(elements))
  end
elseif layout ~= 'none' then
  return redis.error_reply('unknown layout ' .. layout)
end
return n / 2
