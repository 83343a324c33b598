-- list.lua: one page of a sorted set's messages, in score order, after a cursor.
--
-- KEYS[1] set       zset  a due, lease or parked set: member (see scripts.go) -> score (µs)
-- KEYS[2] messages  hash  field (see scripts.go) -> marshaled message
-- ARGV[1] which part: due (score <= now), scheduled (score > now) or all
-- ARGV[2] the cursor's score, or "" for the first page
-- ARGV[3] the cursor's member: the page starts after it
-- ARGV[4] the most messages on the page
--
-- Returns {now µs, then per message: member, score µs, marshaled message or false}. Members of
-- equal score come in member order, as Redis keeps them; the cursor skips those up to its own.

local now = now_us()
local part, limit = ARGV[1], tonumber(ARGV[4])
-- '(1e300' leaves out the lease set's marker (see scripts.go).
local min, max = '-inf', '(1e300'
if part == 'due' then max = now elseif part == 'scheduled' then min = '(' .. now end
local cursor_score, cursor_member = tonumber(ARGV[2]), ARGV[3]
if cursor_score then min = cursor_score end
local result = {now}
local members, ids, scores, embedded = {}, {}, {}, {}
local offset = 0
while #members < limit do
  local batch = redis.call('ZRANGEBYSCORE', KEYS[1], min, max, 'WITHSCORES', 'LIMIT', offset, limit + 16)
  if #batch == 0 then break end
  offset = offset + #batch / 2
  for i = 1, #batch, 2 do
    local m, score = batch[i], tonumber(batch[i + 1])
    if #members < limit and not (cursor_score and score == cursor_score and m <= cursor_member) then
      local id, _, message = split(m)
      members[#members + 1] = m
      ids[#ids + 1] = id
      scores[#scores + 1] = score
      embedded[#embedded + 1] = message or false
    end
  end
end
local data = stored(KEYS[2], ids)
for i, m in ipairs(members) do
  result[#result + 1] = m
  result[#result + 1] = scores[i]
  result[#result + 1] = embedded[i] or data[i] or false
end
return result
