-- fragment far_find; needs: far, position
-- FAR_FIND_ENTRIES bounds the bucket entries far_find reads per call.
local FAR_FIND_ENTRIES = 10000

-- far_find returns the member of the compact tier (index far) due at score (µs, a decimal
-- string, which Redis reads exactly) that is m or, when m is a short form "ID|", whose short
-- form it is, with the index member of its bucket and its bucket entry; nil when the buckets
-- that could hold it (the 16 of latest move time up to score that start at or before it) do
-- not within their first FAR_FIND_ENTRIES entries in all.
local function far_find(far, score, m)
  local short, us = is_short(m), tonumber(score)
  local left = FAR_FIND_ENTRIES
  for _, b in ipairs(redis.call('ZREVRANGEBYSCORE', far, score, '-inf', 'LIMIT', 0, 16)) do
    local start = tonumber(string.match(b, ':(%d+)$'))
    if start and start <= us and us - start < 2 ^ 40 then
      local want, i = far_entry(us - start, m), 0
      while left > 0 do
        local n = math.min(1000, left)
        local entries = redis.call('LRANGE', far .. ':' .. b, i, i + n - 1)
        for _, e in ipairs(entries) do
          if e == want or short and string.sub(e, 1, #want) == want then
            local _, found = far_read(e)
            return found, b, e
          end
        end
        left, i = left - #entries, i + #entries
        if #entries < n then break end
      end
      if left <= 0 then break end
    end
  end
  return nil
end
