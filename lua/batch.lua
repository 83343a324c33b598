-- batch.lua: adds items to the open batch of a batch key on a topic, atomically. A batch is a
-- keyed message (see scripts.go) whose key is "\1", the batch key, "\1" and its ID's hex digits,
-- so every batch is a message of its own; its stored value is the ID's hex digits, a trigger
-- letter (t time, s size, f flush) and the items, each as its length in decimal, ":" and the
-- marshaled item. The first item opens a batch and schedules it, in every group, MaxWait after
-- that item on the Redis clock; the item that brings it to MaxItems (or MaxBytes) releases it at
-- once, in the same call. Later items open the next batch. A batch whose due time has come is
-- closed even while nobody has claimed it yet.
--
-- KEYS[1]            call      string  this call's token: holds the reply once the call ran
-- KEYS[2]            seq       string  internal ID counter of the topic
-- KEYS[3]            messages  hash    field (see scripts.go) -> stored message
-- KEYS[4]            refs      hash    field -> groups still holding it (when G > 1)
-- KEYS[5]            groups    set     registered consumer groups
-- KEYS[6]            parked    zset    messages waiting for a first group (when G = 0)
-- KEYS[7]            batches   hash    batch key -> "hex count bytes due" of its open batch
-- KEYS[8..7+G]       due       zset    one per group in ARGV[3..2+G]
-- ARGV[1]            how long the call key is kept, ms
-- ARGV[2]            G, the number of groups the caller believes are registered
-- ARGV[3..2+G]       group names
-- ARGV[3+G..2+2G]    wake channels of those groups
-- ARGV[3+2G]         the batch key
-- ARGV[4+2G]         MaxItems
-- ARGV[5+2G]         MaxWait, µs
-- ARGV[6+2G]         MaxBytes, 0 for no limit
-- ARGV[7+2G..]       the marshaled items, in order
--
-- Returns {1, batches released by size}, or {0, group...} when the view of the groups is stale
-- (nothing written).

local ngroups = tonumber(ARGV[2])
local done = redis.call('GET', KEYS[1])
if done then return {1, tonumber(done)} end
local stale = redis.call('SCARD', KEYS[5]) ~= ngroups
if not stale and ngroups > 0 then
  local names = {}
  for g = 1, ngroups do names[g] = ARGV[2 + g] end
  for _, present in ipairs(redis.call('SMISMEMBER', KEYS[5], unpack(names))) do
    if present == 0 then stale = true end
  end
end
if stale then
  local current = redis.call('SMEMBERS', KEYS[5])
  table.insert(current, 1, 0)
  return current
end

local a = 3 + 2 * ngroups
local bk = ARGV[a]
local max_items, max_wait, max_bytes = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
local now = now_us()

-- The open batch: its hex digits, item count, bytes, due time and value so far.
local open = nil
local entry = redis.call('HGET', KEYS[7], bk)
if entry then
  local hex, count, bytes, due = string.match(entry, '^(%x+) (%d+) (%d+) (%d+)$')
  if hex and tonumber(due) > now then
    local hfield = '=\1' .. bk .. '\1' .. hex
    local value = redis.call('HGET', KEYS[3], hfield)
    if value then
      open = {hex = hex, hfield = hfield, count = tonumber(count), bytes = tonumber(bytes), due = tonumber(due), value = value}
    end
  end
end

local function batch_member(b) return b.hex .. b.hfield .. ':0' end

local function each_group(f)
  if ngroups == 0 then f(KEYS[6], nil) end
  for g = 1, ngroups do f(KEYS[7 + g], ARGV[2 + ngroups + g]) end
end

local released = 0
for i = a + 4, #ARGV do
  if not open then
    local hex = string.format('%012x', redis.call('INCR', KEYS[2]))
    open = {hex = hex, hfield = '=\1' .. bk .. '\1' .. hex, count = 0, bytes = 0, due = now + max_wait}
    open.value = hex .. 't'
    if ngroups > 1 then redis.call('HSET', KEYS[4], open.hfield, ngroups) end
    local b = open
    each_group(function(due, channel)
      if channel then schedule(due, channel, {b.due, batch_member(b)}, b.due)
      else redis.call('ZADD', due, b.due, batch_member(b)) end
    end)
  end
  local item = ARGV[i]
  open.value = open.value .. #item .. ':' .. item
  open.count = open.count + 1
  open.bytes = open.bytes + #item
  if open.count >= max_items or (max_bytes > 0 and open.bytes >= max_bytes) then
    open.value = string.sub(open.value, 1, 12) .. 's' .. string.sub(open.value, 14)
    redis.call('HSET', KEYS[3], open.hfield, open.value)
    local b = open
    each_group(function(due, channel)
      if channel then schedule(due, channel, {now, batch_member(b)}, now)
      else redis.call('ZADD', due, now, batch_member(b)) end
    end)
    redis.call('HDEL', KEYS[7], bk)
    released = released + 1
    open = nil
  end
end
if open then
  redis.call('HSET', KEYS[3], open.hfield, open.value)
  redis.call('HSET', KEYS[7], bk, open.hex .. ' ' .. open.count .. ' ' .. open.bytes .. ' ' .. string.format('%d', open.due))
end
redis.call('SET', KEYS[1], released, 'PX', ARGV[1])
return {1, released}
