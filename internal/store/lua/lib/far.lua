-- fragment far; needs: int, each_chunk, split
-- The compact tier: messages due far ahead wait in time buckets, Redis lists, instead of the
-- group's due set, and move into the due set a bucket at a time before they fall due. A sorted
-- set entry costs about 120 bytes of Redis bookkeeping; a list entry a few. The tier of a group
-- is its index (a sorted set, the key `far`): one member "E:S" per bucket, E the group's epoch
-- (a group registered again after a removal starts new buckets, so that the removal's later
-- steps never drain them) and S the bucket's start in Unix µs, scored by the time the bucket
-- moves: S minus the horizon it was written with. The bucket is the list `far` .. ":" .. member;
-- each entry is the offset of its message's due time from S, 5 bytes big-endian, then the
-- message's due-set member. `far` .. ":n" counts the tier's messages. A bucket of horizon H
-- holds due times in [S, S + H) with S a multiple of H, so it moves at least H before its
-- first message is due; publishers with another horizon can share a bucket (the earliest move
-- time stays), and still every message moves before its due time.

-- FAR_OFFSET_BYTES is the size of a bucket entry's offset: up to 2^40 µs, about 12.7 days,
-- which bounds the horizon.
local FAR_OFFSET_BYTES = 5

-- far_entry is a bucket entry: the offset (µs, 0 <= offset < 2^40) and the member m.
local function far_entry(offset, m)
  local e = offset % 256
  offset = (offset - e) / 256
  local d = offset % 256
  offset = (offset - d) / 256
  local c = offset % 256
  offset = (offset - c) / 256
  local b = offset % 256
  return string.char((offset - b) / 256, b, c, d, e) .. m
end

-- far_read returns a bucket entry's offset (µs) and member.
local function far_read(entry)
  local offset = 0
  for i = 1, FAR_OFFSET_BYTES do offset = offset * 256 + string.byte(entry, i) end
  return offset, string.sub(entry, FAR_OFFSET_BYTES + 1)
end

-- far_put appends messages (entries: score, member pairs; scores in Unix µs, each at least one
-- horizon after its bucket's move) to the compact tier of the group with index far and epoch
-- epoch, and returns the earliest move time of their buckets.
local function far_put(far, epoch, horizon, entries)
  local buckets, order = {}, {}
  for i = 1, #entries, 2 do
    local score = entries[i]
    local start = score - score % horizon
    local b = buckets[start]
    if not b then
      b = {}
      buckets[start] = b
      order[#order + 1] = start
    end
    b[#b + 1] = far_entry(score - start, entries[i + 1])
  end
  local index = {}
  for _, start in ipairs(order) do
    local m = epoch .. ':' .. int(start)
    each_chunk('RPUSH', far .. ':' .. m, buckets[start])
    index[#index + 1] = int(start - horizon)
    index[#index + 1] = m
  end
  for i = 1, #index, 1000 do
    redis.call('ZADD', far, 'NX', unpack(index, i, math.min(i + 999, #index)))
  end
  redis.call('INCRBY', far .. ':n', #entries / 2)
  local move = tonumber(index[1])
  for i = 3, #index, 2 do move = math.min(move, tonumber(index[i])) end
  return move
end

-- far_promote moves up to limit messages from the buckets of the compact tier (index far) whose
-- move time has come (scored up to now) into the due set, bucket after bucket, each message at
-- its due time. Returns the start of the first bucket it left unfinished (every message left
-- in it is due at or after that), or nil when none is left to move now; and the index's
-- earliest move time once it is done (Unix µs), or nil when the index is empty, so that the
-- caller need not read it again.
local function far_promote(due, far, now, limit)
  local moved, left, next_move = 0, nil, nil
  while true do
    -- Every claim reads this, a compact tier or not: its LIMIT goes as text (see head).
    local first = redis.call('ZRANGEBYSCORE', far, '-inf', '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
    -- (Not `next_move = first[2] and tonumber(first[2])`: gopher-lua, miniredis's Lua,
    -- miscompiled that assignment here and went on with an empty reply.)
    if #first == 0 then
      next_move = nil
      break
    end
    next_move = tonumber(first[2])
    if next_move > now then break end
    local start = tonumber(string.match(first[1], ':(%d+)$'))
    if start and moved >= limit then
      left = start
      break
    end
    local want = limit - moved
    local entries = start and redis.call('LPOP', far .. ':' .. first[1], want)
    local n = entries and #entries or 0
    if n > 0 then
      local back = {}
      for i, e in ipairs(entries) do
        local offset, m = far_read(e)
        back[2 * i - 1] = int(start + offset)
        back[2 * i] = m
      end
      each_chunk('ZADD', due, back)
      moved = moved + n
    end
    if n < want then redis.call('ZREM', far, first[1]) end
  end
  if moved > 0 and redis.call('DECRBY', far .. ':n', moved) <= 0 then redis.call('DEL', far .. ':n') end
  return left, next_move
end

-- far_drain takes up to left messages out of the compact tier whose buckets are named after
-- far: from the buckets of index (far itself, or a removal's copy of it) scored min or later (a
-- ZRANGEBYSCORE bound), first bucket first, without moving them to the due set; a bucket it
-- empties leaves index. It appends the messages' IDs to ids and returns how many it took. The
-- caller keeps the tier's count (`far` .. ":n") and drops the messages.
local function far_drain(index, far, min, left, ids)
  local taken = 0
  while left > taken do
    local bucket = redis.call('ZRANGEBYSCORE', index, min, '+inf', 'LIMIT', 0, 1)[1]
    if not bucket then break end
    local entries = redis.call('LPOP', far .. ':' .. bucket, left - taken)
    local n = entries and #entries or 0
    for i = 1, n do
      local _, m = far_read(entries[i])
      ids[#ids + 1] = (split(m))
    end
    if n < left - taken then redis.call('ZREM', index, bucket) end
    taken = taken + n
  end
  return taken
end
