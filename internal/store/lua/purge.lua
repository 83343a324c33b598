-- purge.lua: drops up to N messages of one part of a consumer group's set, for the group only:
-- each stored message goes once no other group holds it. A batch it drops is closed (see
-- close_batch), so the next item of its batch key opens a new batch.
--
-- fragments: int, now_us, split, each_chunk, far, drop, close_batch
-- KEYS[1] set       zset    the group's due or lease set
-- KEYS[2] messages  hash    field (see scripts.go) -> marshaled message
-- KEYS[3] refs      hash    field -> groups still holding it
-- KEYS[4] keyed     hash    the group's claimed keyed messages
-- KEYS[5] history   prefix  of the history keys of keyed messages
-- KEYS[6] groups    set     registered consumer groups
-- KEYS[7] batches   hash    batch key -> "hex count bytes due" of its open batch
-- KEYS[8] far       zset    the group's compact-tier index (see far in lib)
-- ARGV[1] which part: due (score <= now), scheduled (score > now) or all
-- ARGV[2] N, the most messages to drop in this call
-- ARGV[3] the group's name
-- ARGV[4] "far" when KEYS[1] is the due set: first the compact tier's buckets whose move time
--         has come move into the due set (up to N messages, see far_promote), so that every
--         message left in the tier is due later; the scheduled part then includes the tier,
--         whose buckets are emptied once the due set's part is, one after another
--
-- Returns {messages dropped, messages of that part left, 1 when a bucket of the compact tier
-- is still to move (its messages may be of any part) else 0}, or -1 when the group is not
-- registered (nothing changed).

if redis.call('SISMEMBER', KEYS[6], ARGV[3]) == 0 then return -1 end
local now = now_us()
local far = ARGV[4] == 'far'
-- unmoved: a bucket whose move time has come is left, which may hold messages due now.
local unmoved = far and far_promote(KEYS[1], KEYS[8], now, tonumber(ARGV[2]))
far = far and ARGV[1] ~= 'due'
-- '(1e300' leaves out the lease set's marker (see scripts.go).
local min, max = '-inf', '(1e300'
if ARGV[1] == 'due' then max = now elseif ARGV[1] == 'scheduled' then min = '(' .. int(now) end
local members = redis.call('ZRANGEBYSCORE', KEYS[1], min, max, 'LIMIT', 0, tonumber(ARGV[2]))
local ids = {}
for i, m in ipairs(members) do
  local id = split(m)
  ids[i] = id
  local key = key_of(id)
  if key then
    redis.call('HDEL', KEYS[4], key)
    close_batch(KEYS[7], KEYS[2], id)
  end
end
if #members > 0 then each_chunk('ZREM', KEYS[1], members) end
local dropped, left = #members, tonumber(ARGV[2]) - #members
local tiered = 0
-- The scheduled part takes only buckets that move later: their messages are all due later.
local from = ARGV[1] == 'all' and '-inf' or '(' .. int(now)
if far and left > 0 then tiered = far_drain(KEYS[8], KEYS[8], from, left, ids) end
if tiered > 0 and redis.call('DECRBY', KEYS[8] .. ':n', tiered) <= 0 then redis.call('DEL', KEYS[8] .. ':n') end
drop(KEYS[2], KEYS[3], ids, KEYS[5])
local remaining = redis.call('ZCOUNT', KEYS[1], min, max)
if far then remaining = remaining + tonumber(redis.call('GET', KEYS[8] .. ':n') or 0) end
-- A bucket still to move holds messages of any part: the caller calls again.
return {dropped + tiered, remaining, unmoved and 1 or 0}
