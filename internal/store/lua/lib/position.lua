-- fragment position; needs: nothing
-- Positions in a sorted set by score and member, each found in O(log N) commands (a binary
-- search costs O(log² N)), so that a page resumes after its cursor whatever the set holds.
-- Redis orders members of equal score byte by byte; Lua's < follows the server's collation
-- locale, so bytes_before compares the bytes itself.
local function bytes_before(a, b)
  if a == b then return false end
  local n, i = math.min(#a, #b), 1
  while i + 63 <= n and string.sub(a, i, i + 63) == string.sub(b, i, i + 63) do i = i + 64 end
  while i <= n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
    i = i + 1
  end
  return #a < #b
end

-- first_from returns the rank of the first member of the given score (a decimal string) that
-- is not before bound, or the rank after the members of that score.
local function first_from(set, score_text, bound)
  local lo = redis.call('ZCOUNT', set, '-inf', '(' .. score_text)
  local hi = lo + redis.call('ZCOUNT', set, score_text, score_text)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if bytes_before(redis.call('ZRANGE', set, mid, mid)[1], bound) then lo = mid + 1 else hi = mid end
  end
  return lo
end

-- is_short tells a member's short form, "ID|": the 12 hex digits and '|' of a member that
-- holds its message (see scripts.go), which a list names without the message.
local function is_short(name)
  return #name == 13 and string.sub(name, 13) == '|'
end

-- rank_after returns the rank of the first member after (score, name): after every member
-- "ID|..." of that score when name is a short form. name need not be in the set any more.
local function rank_after(set, score, name)
  if is_short(name) then return first_from(set, score, string.sub(name, 1, 12) .. '}') end
  local s = redis.call('ZSCORE', set, name)
  if s and tonumber(s) == tonumber(score) then return redis.call('ZRANK', set, name) + 1 end
  return first_from(set, score, name)
end

-- find_short returns the member of the given score whose short form is short, or nil.
local function find_short(set, score, short)
  local rank = first_from(set, score, short)
  local m = redis.call('ZRANGE', set, rank, rank)[1]
  if m and string.sub(m, 1, 13) == short then
    local s = redis.call('ZSCORE', set, m)
    if tonumber(s) == tonumber(score) then return m end
  end
  return nil
end
