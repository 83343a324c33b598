-- fragment publish_batch; needs: int, each_chunk, hmget, wake, seal_batch
-- A batch is a keyed message whose key is "\1", the batch key, "\1" and its ID's hex digits;
-- its stored value is those hex digits, a trigger letter (t time, s size, f flush) and its items,
-- each as its length in decimal, ":" and the item. While it is open, each item waits in a field
-- of its own and the value gets them when the batch closes (seal_batch). The first item opens a
-- batch, scheduled MaxWait after it in every group; the item that fills it releases it at once
-- (due now, trigger s), in the groups that hold it: those registered when it opened, which its
-- reference count covers. A batch whose due time has come is closed: the next item opens
-- another; so is one that a group claimed, or that an operation by ref moved or cancelled
-- (close_batch).
--
-- The state of a call's batches lives in p.open_batches (created by the call's first item):
-- the open batch of each batch key the call looked at (false: none), {hex, hfield, n items,
-- size bytes, due µs, slot in p.scheduled if opened here}; p.found, each batch key's batches
-- entry as the call found it (batch_find); p.pending, the field/value pairs of items (and of
-- batches opened) not written yet.

-- BATCH brackets the batch key in the key part of a batch's ID: "=", BATCH, the batch key,
-- BATCH and the batch's hex digits (message keys hold no control characters).
local BATCH = '\1'

-- batch_write writes p.pending: one HSET per call, or before a batch closes, since sealing
-- reads them.
local function batch_write(p)
  if #p.pending > 0 then each_chunk('HSET', p.messages, p.pending) end
  p.pending = {}
end

-- batch_find returns the batches entries of all the batch keys of publish_to's call p, parsed,
-- with live set when the batch was still open (due later, its field there): two HMGETs per
-- call rather than two reads per item.
local function batch_find(p)
  local found, keys, seen, live, fields = {}, {}, {}, {}, {}
  for i = 0, p.count - 1 do
    local spec = ARGV[p.first + 3 * i + 2]
    if string.sub(spec, 1, 1) == 'B' then
      local bk = string.sub(spec, string.find(spec, '=', 2, true) + 1)
      if seen[bk] == nil then seen[bk], keys[#keys + 1] = true, bk end
    end
  end
  for i, entry in ipairs(hmget(p.batches, keys)) do
    local hex, n, size, due = string.match(entry or '', '^(%x+) (%d+) (%d+) (%d+)$')
    if hex then
      local bk = keys[i]
      local b = {hex = hex, hfield = '=' .. BATCH .. bk .. BATCH .. hex, n = tonumber(n), size = tonumber(size), due = tonumber(due)}
      found[bk] = b
      if b.due > p.now then live[#live + 1], fields[#fields + 1] = b, b.hfield end
    end
  end
  for i, value in ipairs(hmget(p.messages, fields)) do live[i].live = value ~= false end
  return found
end

-- batch_open opens a batch of batch key bk with the item ID id, due max_wait µs from now.
local function batch_open(p, bk, id, max_wait)
  local b = {hex = id, hfield = '=' .. BATCH .. bk .. BATCH .. id, n = 0, size = 0, due = p.now + max_wait}
  local pending, counted, scheduled = p.pending, p.counted, p.scheduled
  pending[#pending + 1] = b.hfield
  pending[#pending + 1] = id .. 't'
  if p.holders > 1 then
    counted[#counted + 1] = b.hfield
    counted[#counted + 1] = p.holders
  end
  scheduled[#scheduled + 1] = b.due
  b.slot = #scheduled
  scheduled[#scheduled + 1] = b.hex .. b.hfield .. ':0'
  return b
end

-- batch_release releases batch b of batch key bk, full, now (trigger s), and ends its open
-- state.
local function batch_release(p, bk, b)
  seal_batch(p.messages, b.hfield, b.n, 's')
  if b.slot then
    p.scheduled[b.slot] = p.now
  else
    -- The batch goes to the groups registered when it opened, which its reference count
    -- covers: it moves where it is (XX), and a group that registered since gets nothing.
    local m = b.hex .. b.hfield .. ':0'
    redis.call('ZADD', p.parked, 'XX', p.now, m)
    for g = 1, p.ngroups do
      if redis.call('ZADD', p.due[g], 'XX', 'CH', p.now, m) == 1 then
        wake(p.channel[g], nil, p.now)
      end
    end
  end
  redis.call('HDEL', p.batches, bk)
end

-- batch_item adds an item (data, with the ID id) of publish_to's call p to its batch key's open
-- batch, opening one when there is none, and releasing it now when it is full. The item goes
-- into a field of its own until the batch closes (see seal_batch): O(item), whatever the batch
-- holds. A batch whose due time has passed, unclaimed, is sealed here before the next opens.
local function batch_item(p, spec, data, id)
  local eq = string.find(spec, '=', 2, true)
  local max_items, max_wait, max_bytes = string.match(string.sub(spec, 2, eq - 1), '^(%d+) (%d+) (%d+)$')
  max_items, max_wait, max_bytes = tonumber(max_items), tonumber(max_wait), tonumber(max_bytes)
  local bk = string.sub(spec, eq + 1)
  if not p.open_batches then p.open_batches, p.pending, p.found = {}, {}, batch_find(p) end
  local b = p.open_batches[bk]
  if b == nil then
    b = p.found[bk] or false
    if b and not b.live then
      seal_batch(p.messages, b.hfield, b.n, 't')
      b = false
    end
  end
  if not b then b = batch_open(p, bk, id, max_wait) end
  b.n, b.size = b.n + 1, b.size + #data
  local pending = p.pending
  pending[#pending + 1] = b.hfield .. BATCH .. int(b.n)
  pending[#pending + 1] = int(#data) .. ':' .. data
  if b.n >= max_items or (max_bytes > 0 and b.size >= max_bytes) then
    batch_write(p)
    batch_release(p, bk, b)
    b = false
  end
  p.open_batches[bk] = b
end
