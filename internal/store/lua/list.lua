-- list.lua: one page of a sorted set's messages, in score order, after a cursor, with a preview
-- of each: the first bytes of its stored message and its size, never the whole message.
--
-- fragments: now_us, position, list_row
-- KEYS[1] set       zset  a due, lease or parked set: member (see scripts.go) -> score (µs)
-- KEYS[2] messages  hash  field (see scripts.go) -> marshaled message
-- ARGV[1] which part: due (score <= now), scheduled (score > now) or all
-- ARGV[2] the cursor's score, or "" for the first page
-- ARGV[3] the cursor's member: the page starts after it (see rank_after), present or not
-- ARGV[4] the most messages on the page
-- ARGV[5] how many bytes of each stored message to return
-- ARGV[6] the most bytes of stored messages to read: the page ends after the message that
--         reaches it, and before a message stored in the hash that would pass it (the first
--         message is always read)
--
-- Returns {now µs, cut, then per message: member, score µs, size, first bytes or false}. cut
-- is 1 when the page ended for ARGV[6]. A member that holds its message (ID|message) comes in
-- its short form "ID|"; size is the stored message's length in bytes, -1 when it has vanished.
-- Members of equal score come in byte order, as Redis keeps them. The work is O(log² N) to find
-- the cursor's position, then O(log N + M) for M messages read.

local now = now_us()
local part, limit = ARGV[1], tonumber(ARGV[4])
local prefix, budget = tonumber(ARGV[5]), tonumber(ARGV[6])
local rank = 0
if ARGV[2] ~= '' then
  rank = rank_after(KEYS[1], ARGV[2], ARGV[3])
elseif part == 'scheduled' then
  rank = redis.call('ZCOUNT', KEYS[1], '-inf', now)
end
-- The rank after the part: '(1e300' leaves out the lease set's marker (see scripts.go).
local stop = redis.call('ZCOUNT', KEYS[1], '-inf', part == 'due' and now or '(1e300')
local result = {now, 0}
-- A member holds at most MAX_EMBEDDED bytes of message (see publish_plain), so one ZRANGE of the
-- whole page reads at most limit KiB.
local page = {}
if rank < stop then
  page = redis.call('ZRANGE', KEYS[1], rank, math.min(rank + limit, stop) - 1, 'WITHSCORES')
end
local read = 0
for i = 1, #page, 2 do
  read = list_row(result, KEYS[2], page[i], page[i + 1], prefix, read, budget, i == 1)
  if not read or read >= budget and i + 1 < #page then
    result[2] = 1
    break
  end
end
return result
