-- release.lua: gives claimed messages back to their group, due at their original due time, when
-- a subscription stops (Close or a cancelled Subscribe context). A message that was claimed but
-- never handed to the application does not count as an attempt. The messages of a claim whose
-- reply never arrived (its token is still in the subscription's claim record) are released too,
-- due at once, or, for a claim that took messages ahead of their due time, at the latest due
-- time it could take (see claim.lua): never earlier than they were due.
--
-- fragments: now_us, split, member, each_chunk, schedule, held
-- KEYS[1] due     zset    member (see ids.go) -> due time (µs)
-- KEYS[2] lease   zset    ID:attempt -> lease deadline (µs)
-- KEYS[3] record  string  the subscription's last claim (see claim.lua)
-- KEYS[4] keyed   hash    the group's claimed keyed messages: key -> member
-- ARGV[1] wake channel of the group
-- ARGV[2] token of the subscription's last claim whose reply did not arrive, or ""
-- ARGV[3] the group's epoch the leases were claimed in (see lease_marker in lib)
-- ARGV[4..] triples: lease member (ID:attempt), due time (µs), 1 if it was handed out else 0
--
-- Returns the number of messages released; a message whose lease was already lost (or is not of
-- that epoch) is skipped.

local now = now_us()
local releases = {}
for i = 4, #ARGV, 3 do
  releases[#releases + 1] = {ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2] == '1'}
end
local token = ARGV[2]
if token ~= '' then
  local record = redis.call('GET', KEYS[3])
  if record and string.sub(record, 1, #token + 1) == token .. ' ' then
    local deadline, upto = string.match(string.sub(record, #token + 2), '^(%d+) ?(%d*)$')
    local at = math.max(now, tonumber(upto) or now)
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], deadline, deadline)) do
      releases[#releases + 1] = {m, at, false}
    end
  end
end

local members = {}
for i, r in ipairs(releases) do members[i] = r[1] end
local leased = held(KEYS[2], members, ARGV[3])
local min_score = nil
local done, back, keyed = {}, {}, {}
for _, r in ipairs(releases) do
  local m, score, delivered = r[1], r[2], r[3]
  if leased[m] then
    leased[m] = nil
    local id, attempt = split(m)
    if not delivered then attempt = attempt - 1 end
    done[#done + 1] = m
    back[#back + 1] = score
    back[#back + 1] = member(id, attempt)
    local key = key_of(id)
    if key then
      keyed[#keyed + 1] = key
      keyed[#keyed + 1] = member(id, attempt)
    end
    if min_score == nil or score < min_score then min_score = score end
  end
end
if #done > 0 then
  each_chunk('ZREM', KEYS[2], done)
  schedule(KEYS[1], ARGV[1], back, min_score)
end
if #keyed > 0 then each_chunk('HSET', KEYS[4], keyed) end
return #done
