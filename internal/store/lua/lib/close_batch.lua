-- fragment close_batch; needs: split, seal_batch
-- close_batch ends the open state of the batch with ID `id` (see publish_batch): when the batches
-- hash still names that batch as its batch key's open batch, its items are sealed into its
-- stored value (seal_batch, trigger t) and the entry goes, so the next item of the key opens a
-- new batch instead of joining one that is already claimed, rescheduled, cancelled or dropped
-- for a group. Any other ID, or an entry that names a newer batch, is left alone. batches is
-- the topic's batches hash, messages its messages hash. A caller that reads or drops the
-- batch's stored value closes it first.
local function close_batch(batches, messages, id)
  local key = key_of(id)
  if not key or string.sub(key, 1, 1) ~= '\1' then return end
  local close = string.find(key, '\1', 2, true)
  if not close then return end
  local bk, hex = string.sub(key, 2, close - 1), string.sub(key, close + 1)
  local entry = redis.call('HGET', batches, bk)
  if entry and string.sub(entry, 1, #hex + 1) == hex .. ' ' then
    local n = tonumber(string.match(entry, '^%x+ (%d+) '))
    if n then seal_batch(messages, '=' .. key, n, 't') end
    redis.call('HDEL', batches, bk)
  end
end
