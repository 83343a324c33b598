-- workers_list.lua: reads one page of worker records in member order (kind, then ID), leaving
-- out those that expired on the Redis clock. It only reads; the page is at most ARGV[3]
-- members, which the caller caps, so a page may hold fewer records than that when some expired.
--
-- fragments: now_us
-- KEYS[1]  index   zset  worker member, scored 0 (see worker_beat.lua)
-- KEYS[2]  info    hash  worker member -> "expiry lastbeat record"
-- ARGV[1]  where the page starts, as ZRANGE BYLEX takes it ("-", "[kind " or "(member")
-- ARGV[2]  where the members end, as ZRANGE BYLEX takes it ("+" or "(kind!")
-- ARGV[3]  the page size
--
-- Returns {now (Unix ms), the page's last member or "" when no more follow, member, record,
-- member, record, ...}.

local limit = tonumber(ARGV[3])
local now = math.floor(now_us() / 1000)
local members = redis.call('ZRANGE', KEYS[1], ARGV[1], ARGV[2], 'BYLEX', 'LIMIT', 0, limit + 1)
local reply = {now, ''}
for i, m in ipairs(members) do
  if i > limit then
    reply[2] = members[limit]
    break
  end
  local record = redis.call('HGET', KEYS[2], m)
  local expires = record and tonumber(string.match(record, '^(%d+) '))
  if expires and expires > now then
    reply[#reply + 1] = m
    reply[#reply + 1] = record
  end
end
return reply
