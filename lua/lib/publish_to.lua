-- fragment publish_to; needs: now_us, each_chunk, schedule
-- publish_to stores messages once and schedules each for every consumer group registered on a
-- topic: in the messages hash, or, with one group and at most MAX_EMBEDDED bytes, in the due
-- member itself (a larger member would make every ZRANGE of the set's head copy it). The
-- topic's keys start at KEYS[k]: call (string, this publish call's token), seq (string),
-- messages (hash),
-- refs (hash), groups (set), parked (sorted set), then one due sorted set per group. Its
-- arguments start at ARGV[a]: how long the call's token is kept (ms), G, G group names, their G
-- wake channels, then pairs of marshaled message and schedule (a delay in µs after now, or "@"
-- and a Unix time in µs, due at once if past).
--
-- With G = 0, no group is registered yet: the messages wait in the parked set, in the
-- single-group form, until the first group registers and takes the set over (register.lua).
--
-- The call key makes a second run of the same call (a client retry after a lost reply) store
-- nothing more: it holds the first ID stored by the first run.
--
-- Returns {1, first ID}, or {0, group...} when the caller's view of the groups is stale; nothing
-- is written then, and the caller retries with the listed groups.
local MAX_EMBEDDED = 1024

local function publish_to(k, a)
  local call, seq, messages, refs, groups, parked =
    KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], KEYS[k + 5]
  local ttl, ngroups = ARGV[a], tonumber(ARGV[a + 1])
  local done = redis.call('GET', call)
  if done then return {1, done} end
  if redis.call('SCARD', groups) ~= ngroups then
    local current = redis.call('SMEMBERS', groups)
    table.insert(current, 1, 0)
    return current
  end

  local first = a + 2 + 2 * ngroups
  local count = (#ARGV - first + 1) / 2
  local now = now_us()
  local scores, min_score = {}, nil
  for i = 0, count - 1 do
    local schedule = ARGV[first + 2 * i + 1]
    local score
    if string.sub(schedule, 1, 1) == '@' then
      score = math.max(tonumber(string.sub(schedule, 2)), now)
    else
      score = now + math.max(tonumber(schedule), 0)
    end
    if min_score == nil or score < min_score then min_score = score end
    scores[#scores + 1] = score
  end

  local last_id = redis.call('INCRBY', seq, count)
  local first_id = string.format('%012x', last_id - count + 1)
  local stored, scheduled, counted = {}, {}, {}
  for i = 0, count - 1 do
    local id = string.format('%012x', last_id - count + 1 + i)
    local data = ARGV[first + 2 * i]
    scheduled[#scheduled + 1] = scores[i + 1]
    if ngroups <= 1 and #data <= MAX_EMBEDDED then
      scheduled[#scheduled + 1] = id .. '|' .. data
    else
      scheduled[#scheduled + 1] = id
      stored[#stored + 1] = id
      stored[#stored + 1] = data
      if ngroups > 1 then
        counted[#counted + 1] = id
        counted[#counted + 1] = ngroups
      end
    end
  end
  if #stored > 0 then each_chunk('HSET', messages, stored) end
  if #counted > 0 then each_chunk('HSET', refs, counted) end
  if ngroups == 0 then
    each_chunk('ZADD', parked, scheduled)
  end
  for g = 1, ngroups do
    schedule(KEYS[k + 5 + g], ARGV[a + 1 + ngroups + g], scheduled, min_score)
  end
  redis.call('SET', call, first_id, 'PX', ttl)
  return {1, first_id}
end
