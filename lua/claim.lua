-- claim.lua: acknowledges a consumer's finished messages, makes messages whose lease expired due
-- again, and claims up to N due messages for the next attempt, leasing each for the lease
-- timeout. Due messages are claimed in due-time order, ties in publish order.
--
-- KEYS[1] due       zset  member (ID, ID|message or ID:N, see lib.lua) -> due time (µs)
-- KEYS[2] lease     zset  ID:attempt -> lease deadline (µs)
-- KEYS[3] messages  hash  ID -> marshaled message
-- KEYS[4] refs      hash  ID -> groups still holding it
-- ARGV[1] N, the most messages to claim
-- ARGV[2] lease timeout in µs
-- ARGV[3..] lease members (ID:attempt) the caller acked
--
-- Returns {now µs, next due µs or -1, next lease deadline µs or -1, {IDs whose ack was refused},
--          vanished count, then per claimed message: ID, attempt, due µs, marshaled message}.
-- An ack is refused when its lease was lost (fencing). A claimed ID whose stored message has
-- vanished is dropped from the group and counted as vanished.

local limit = tonumber(ARGV[1])
local lease = tonumber(ARGV[2])
local now = now_us()

local acked = {}
for i = 3, #ARGV do acked[#acked + 1] = ARGV[i] end
local refused = ack(KEYS[2], KEYS[3], KEYS[4], acked)

-- An expired lease puts the message back at its lease deadline, which is in the past, so it is
-- claimed before messages that came due later; its member keeps the attempt count.
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
if #expired > 0 then
  local members, back = {}, {}
  for i = 1, #expired, 2 do
    members[#members + 1] = expired[i]
    back[#back + 1] = expired[i + 1]
    back[#back + 1] = expired[i]
  end
  each_chunk('ZREM', KEYS[2], members)
  each_chunk('ZADD', KEYS[1], back)
end

local result = {now, -1, -1, refused, 0}
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
if #due > 0 then
  local members, ids, attempts, scores, embedded, stored = {}, {}, {}, {}, {}, {}
  for i = 1, #due, 2 do
    local id, n, message = split(due[i])
    members[#members + 1] = due[i]
    ids[#ids + 1] = id
    attempts[#attempts + 1] = n + 1
    scores[#scores + 1] = due[i + 1]
    embedded[#ids] = message
    if message then
      stored[#stored + 1] = id
      stored[#stored + 1] = message
    end
  end
  each_chunk('ZREM', KEYS[1], members)
  -- A claimed message lives in the messages hash until its group is done with it.
  if #stored > 0 then each_chunk('HSET', KEYS[3], stored) end
  local data = {}
  if #stored < 2 * #ids then data = hmget(KEYS[3], ids) end
  for i = 1, #ids do
    if embedded[i] then data[i] = embedded[i] end
  end
  local leases, vanished = {}, {}
  for i, id in ipairs(ids) do
    if data[i] then
      leases[#leases + 1] = now + lease
      leases[#leases + 1] = member(id, attempts[i])
      result[#result + 1] = id
      result[#result + 1] = attempts[i]
      result[#result + 1] = scores[i]
      result[#result + 1] = data[i]
    else
      vanished[#vanished + 1] = id
    end
  end
  if #leases > 0 then each_chunk('ZADD', KEYS[2], leases) end
  drop(KEYS[3], KEYS[4], vanished)
  result[5] = #vanished
end
result[2] = head(KEYS[1]) or -1
result[3] = head(KEYS[2]) or -1
return result
