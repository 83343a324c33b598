-- fragment seal_batch; needs: int, each_chunk, hmget
-- seal_batch writes the n items of an open batch into its stored value, in order, with the
-- trigger letter (t time, s size, f flush), once, as the batch closes. While a batch is open
-- (see publish_batch) its stored value holds only its hex digits and 't', and each item waits in a
-- field of its own, the batch's field, "\1" and the item's number from 1, so that adding an
-- item costs O(item); sealing costs O(batch), once. A batch whose field has gone (dropped)
-- loses its items' fields too.
local function seal_batch(messages, hfield, n, trigger)
  local fields = {}
  for i = 1, n do fields[i] = hfield .. '\1' .. int(i) end
  local value = redis.call('HGET', messages, hfield)
  if value and (n > 0 or trigger ~= 't') then
    local parts = {string.sub(value, 1, 12), trigger, string.sub(value, 14)}
    if n > 0 then
      for _, item in ipairs(hmget(messages, fields)) do
        if item then parts[#parts + 1] = item end
      end
    end
    redis.call('HSET', messages, hfield, table.concat(parts))
  end
  if n > 0 then each_chunk('HDEL', messages, fields) end
end
