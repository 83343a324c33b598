-- listfar.lua: one page of a consumer group's compact tier (see lib/far.lua), after a cursor:
-- its buckets in index order (move time, then member), the messages of each in the order they
-- were stored, with a preview of each as list.lua gives it.
--
-- fragments: now_us, position, far, list_row
-- KEYS[1] far       zset  the group's compact tier index: bucket "E:S" -> move time (µs)
-- KEYS[2] messages  hash  field (see scripts.go) -> marshaled message
-- ARGV[1] the cursor's bucket's move time (µs), or "" for the first page
-- ARGV[2] the cursor's bucket
-- ARGV[3] the position in it of the first message to list (a bucket that has moved meanwhile
--         is left out: the page starts at the bucket after it)
-- ARGV[4] the most messages on the page
-- ARGV[5] how many bytes of each stored message to return
-- ARGV[6] the most bytes of stored messages to read (see list.lua)
--
-- Returns {now µs, cut, bucket, its move time µs, position after the last message, then per
-- message: member, due time µs, size, first bytes or false}, as list.lua; bucket is "" when
-- the page lists none. The work is O(log N) per bucket and O(1) per message after the first
-- of a bucket, whose LRANGE costs O(position).

local now = now_us()
local far, limit = KEYS[1], tonumber(ARGV[4])
local prefix, budget = tonumber(ARGV[5]), tonumber(ARGV[6])
local rank, pos = 0, 0
if ARGV[1] ~= '' then
  local r = redis.call('ZRANK', far, ARGV[2])
  if r then rank, pos = r, tonumber(ARGV[3]) else rank = rank_after(far, ARGV[1], ARGV[2]) end
end
local result = {now, 0, '', 0, 0}
local read, listed = 0, 0
-- Every bucket holds a message (far_promote removes an emptied one); visits stay bounded anyway.
for _ = 1, limit + 1 do
  local b = redis.call('ZRANGE', far, rank, rank, 'WITHSCORES')
  if #b == 0 or listed == limit then break end
  local start = tonumber(string.match(b[1], ':(%d+)$'))
  local entries = {}
  if start then entries = redis.call('LRANGE', far .. ':' .. b[1], pos, pos + limit - listed - 1) end
  for _, e in ipairs(entries) do
    local offset, m = far_read(e)
    read = list_row(result, KEYS[2], m, start + offset, prefix, read, budget, listed == 0)
    if not read then
      result[2] = 1
      return result
    end
    listed, pos = listed + 1, pos + 1
    result[3], result[4], result[5] = b[1], tonumber(b[2]), pos
    if read >= budget then
      result[2] = 1
      return result
    end
  end
  if listed < limit then rank, pos = rank + 1, 0 end
end
return result
