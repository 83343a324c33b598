-- periodic_list.lua: reads one page of periodic schedules in name order, with their state and
-- the Redis clock. It only reads; the page is at most ARGV[2] schedules, which the caller caps.
--
-- fragments: now_us
-- KEYS[1]          index     zset    every schedule's name, scored 0
-- KEYS[2]          prefix    prefix  of the schedules' state hashes: prefix .. name
-- ARGV[1]          list after this name ("" from the first)
-- ARGV[2]          the page size
--
-- Returns {now in Unix µs, more (1 or 0), name, fields as HGETALL returns them, name, ...}.

local limit = tonumber(ARGV[2])
local from = '-'
if ARGV[1] ~= '' then from = '(' .. ARGV[1] end
local names = redis.call('ZRANGE', KEYS[1], from, '+', 'BYLEX', 'LIMIT', 0, limit + 1)
local reply = {now_us(), 0}
for i, name in ipairs(names) do
  if i > limit then
    reply[2] = 1
    break
  end
  reply[#reply + 1] = name
  reply[#reply + 1] = redis.call('HGETALL', KEYS[2] .. name)
end
return reply
