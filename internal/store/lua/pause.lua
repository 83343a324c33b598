-- pause.lua: pauses or resumes a consumer group. While the paused key exists, claims hand out
-- nothing (claim.lua); messages keep being scheduled. Resuming wakes the group's subscribers,
-- so they claim at once.
--
-- fragments: now_us, wake
-- KEYS[1] groups  set     registered consumer groups
-- KEYS[2] paused  string  the group's paused flag
-- ARGV[1] the group's name
-- ARGV[2] 1 to pause, 0 to resume
-- ARGV[3] the group's wake channel
--
-- Returns 1 when the flag changed, 0 when it was set so already, -1 when the group is not
-- registered (nothing changed).

if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return -1 end
if ARGV[2] == '1' then
  if redis.call('SET', KEYS[2], '1', 'NX') then return 1 end
  return 0
end
local changed = redis.call('DEL', KEYS[2])
if changed == 1 then wake(ARGV[3], nil, now_us()) end
return changed
