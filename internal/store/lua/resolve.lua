-- resolve.lua: the whole members that short forms name ("ID|" and a score, see list.lua), so
-- that an operation by ref can name a member that holds its message.
--
-- fragments: position
-- KEYS[1] set  zset  a due or parked set
-- ARGV    pairs: a short form and its score (µs)
--
-- Returns per pair the member, or false when the set holds none with that short form and score.

local out = {}
for i = 1, #ARGV - 1, 2 do
  out[#out + 1] = find_short(KEYS[1], ARGV[i + 1], ARGV[i]) or false
end
return out
