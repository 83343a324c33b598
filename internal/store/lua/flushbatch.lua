-- flushbatch.lua: releases the open batch of a batch key now (flush), or drops it with its
-- items (cancel). See batch.lua.
--
-- fragments: now_us, wake, stale, seal_batch
-- KEYS[1]            call      string  this call's token: holds the reply once the call ran
-- KEYS[2]            messages  hash    field (see scripts.go) -> stored message
-- KEYS[3]            refs      hash    field -> groups still holding it
-- KEYS[4]            groups    set     registered consumer groups
-- KEYS[5]            parked    zset    messages waiting for a first group
-- KEYS[6]            batches   hash    batch key -> "hex count bytes due" of its open batch
-- KEYS[7]            history   prefix  of the history keys of keyed messages
-- KEYS[8..7+G]       due       zset    one per group in ARGV[5..4+G]
-- ARGV[1]            how long the call key is kept, ms
-- ARGV[2]            flush or cancel
-- ARGV[3]            the batch key
-- ARGV[4]            G
-- ARGV[5..4+G]       group names
-- ARGV[5+G..4+2G]    wake channels of those groups
--
-- Returns {1, items of the batch flushed or cancelled, 0 when there was no open batch}, or
-- {0, group...} when the caller's view of the groups is stale (nothing written).

local done = redis.call('GET', KEYS[1])
if done then return {1, tonumber(done)} end
local ngroups = tonumber(ARGV[4])
local wrong = stale(KEYS[4], 5, ngroups)
if wrong then return wrong end
local now = now_us()
local bk = ARGV[3]
local entry = redis.call('HGET', KEYS[6], bk)
local items = 0
if entry then
  local hex, count, _, due = string.match(entry, '^(%x+) (%d+) (%d+) (%d+)$')
  local hfield = hex and '=\1' .. bk .. '\1' .. hex
  if hex and tonumber(due) > now then
    local m = hex .. hfield .. ':0'
    local sets = {KEYS[5]}
    for g = 1, ngroups do sets[#sets + 1] = KEYS[7 + g] end
    if ARGV[2] == 'flush' then
      seal_batch(KEYS[2], hfield, tonumber(count), 'f')
      for i, set in ipairs(sets) do
        if redis.call('ZADD', set, 'XX', 'CH', now, m) == 1 and i > 1 then
          wake(ARGV[4 + ngroups + i - 1], nil, now)
        end
      end
    else
      for _, set in ipairs(sets) do redis.call('ZREM', set, m) end
      redis.call('HDEL', KEYS[3], hfield)
      redis.call('HDEL', KEYS[2], hfield)
      -- Dropped first, so that sealing only deletes the items' fields.
      seal_batch(KEYS[2], hfield, tonumber(count), 't')
    end
    items = tonumber(count)
  elseif hex then
    -- Due already, unclaimed: it closes with its items, as a claim would close it.
    seal_batch(KEYS[2], hfield, tonumber(count), 't')
  end
  redis.call('HDEL', KEYS[6], bk)
end
redis.call('SET', KEYS[1], items, 'PX', ARGV[1])
return {1, items}
