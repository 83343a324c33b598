-- periodic_advance.lua: moves a periodic schedule on, fenced by its state: the caller read the
-- state, acted on a tick (published its message, or skipped it) and now records that and arms
-- the next tick, atomically with publishing the next tick message (and a buffered tick's
-- recheck message) on the tick topic (see publish_to in lib). The fence makes every stale or
-- repeated call change nothing: a tick message of an old version, a tick already moved past, a
-- second run of the same call (a client retry after a lost reply).
--
-- Modes (ARGV[1]):
--   tick    the tick ARGV[3] (Unix ms) fell due: the state's next tick must still be it
--   resume  the schedule is resumed: it must still be paused; the pause ends
--   buffer  the buffered tick ARGV[3] was published or dropped: it must still be buffered
--
-- fragments: now_us, publish_to
-- KEYS[1]           schedule  hash    the schedule's state (see keys.go)
-- KEYS[2]           call      string  this call's token: holds the reply once it ran
-- KEYS[3]           seq       string  the tick topic's internal ID counter
-- KEYS[4]           messages  hash    field -> marshaled message
-- KEYS[5]           refs      hash    field -> number of groups still holding it
-- KEYS[6]           groups    set     registered consumer groups
-- KEYS[7]           parked    zset    tick messages no group has taken yet
-- KEYS[8]           history   prefix  of the history keys of keyed messages
-- KEYS[9]           batches   hash    batch key -> its open batch (none on the tick topic)
-- KEYS[10]          window    hash    the tick topic's new-group window
-- KEYS[11]          debounce  prefix  of the debounce caps (none on the tick topic)
-- KEYS[12..11+G]    due       zset    one per group of the tick topic
-- KEYS[12+G..11+2G] keyed     hash    one per group: key -> member, once claimed
-- KEYS[12+2G..11+3G] far      zset    one per group: its compact tier's index, prefix of its buckets
-- KEYS[12+3G..11+4G] epoch    string  one per group: its registration (see register.lua)
-- ARGV[1]           mode: tick, resume or buffer
-- ARGV[2]           the version the caller read: any other makes the call stale
-- ARGV[3]           the expected tick (tick, buffer), Unix ms
-- ARGV[4]           the next tick, Unix ms; "" for none (the spec has no future tick); "=" to
--                  keep it as it is
-- ARGV[5]           the last published tick, Unix ms, or "" to keep it
-- ARGV[6]           the key of that tick's message
-- ARGV[7]           the outcome to record (see the root package's ScheduleOutcome), or ""
-- ARGV[8]           how many ticks were published
-- ARGV[9]           how many ticks were skipped
-- ARGV[10]          the buffered tick: Unix ms to set, "-" to clear, "" to keep
-- ARGV[11..]        the arguments of publish_to: call key lifetime (ms), G, G group names, G wake
--                  channels, then the messages to publish (none, the next tick, a recheck)
--
-- Returns {1, first ID, outcomes} when recorded, {2} when stale (nothing written), or {0,
-- group...} when the view of the tick topic's groups is stale (nothing written).

local h = KEYS[1]
local mode, expect = ARGV[1], ARGV[3]
if redis.call('HGET', h, 'ver') ~= ARGV[2] then return {2} end
if mode == 'tick' then
  if redis.call('HGET', h, 'next') ~= expect then return {2} end
elseif mode == 'resume' then
  if redis.call('HGET', h, 'paused') ~= '1' then return {2} end
elseif mode == 'buffer' then
  if redis.call('HGET', h, 'buffered') ~= expect then return {2} end
else
  return redis.error_reply('unknown mode ' .. mode)
end
local result = publish_to(2, 11)
if result[1] ~= 1 then return result end

if ARGV[4] == '' then
  redis.call('HDEL', h, 'next')
elseif ARGV[4] ~= '=' then
  redis.call('HSET', h, 'next', ARGV[4])
end
if ARGV[5] ~= '' then redis.call('HSET', h, 'last', ARGV[5], 'last_key', ARGV[6]) end
if ARGV[7] ~= '' then redis.call('HSET', h, 'outcome', ARGV[7], 'outcome_at', now_us()) end
if tonumber(ARGV[8]) > 0 then redis.call('HINCRBY', h, 'published', ARGV[8]) end
if tonumber(ARGV[9]) > 0 then redis.call('HINCRBY', h, 'skipped', ARGV[9]) end
if ARGV[10] == '-' then
  redis.call('HDEL', h, 'buffered')
elseif ARGV[10] ~= '' then
  redis.call('HSET', h, 'buffered', ARGV[10])
end
if mode == 'resume' then redis.call('HDEL', h, 'paused') end
return result
