-- claim.lua: acknowledges a group's finished messages, makes messages whose lease expired due
-- again, and claims up to N due messages, leasing each for the lease timeout. Due messages are
-- claimed in due-time order, ties in publish order (IDs are fixed-width, so they sort as
-- published).
--
-- KEYS[1] due       zset  ID -> due time (µs)
-- KEYS[2] lease     zset  ID -> lease deadline (µs)
-- KEYS[3] attempts  hash  ID -> attempts so far
-- KEYS[4] messages  hash  ID -> marshaled message
-- KEYS[5] refs      hash  ID -> groups still holding it
-- ARGV[1] N, the most messages to claim
-- ARGV[2] lease timeout in µs
-- ARGV[3] A, the number of acks that follow
-- ARGV[4..3+2A] pairs: ID, attempt of a message the caller acked
--
-- Returns {now µs, next due µs or -1, next lease deadline µs or -1, {IDs whose ack was refused},
--          vanished count, then per claimed message: ID, attempt, due µs, marshaled message}.
-- An ack is refused when its lease was lost (fencing). A claimed ID whose stored message has
-- vanished is dropped from the group and counted as vanished.

local limit = tonumber(ARGV[1])
local lease = tonumber(ARGV[2])
local acks = tonumber(ARGV[3])
local now = now_us()

local refused = {}
for i = 0, acks - 1 do
  local id, attempt = ARGV[4 + 2 * i], ARGV[5 + 2 * i]
  if holds(KEYS[2], KEYS[3], id, attempt) then
    finish(KEYS[2], KEYS[3], KEYS[4], KEYS[5], id)
  else
    table.insert(refused, id)
  end
end

-- An expired lease puts the message back at its lease deadline, which is in the past, so it is
-- claimed before messages that came due later.
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
for i = 1, #expired, 2 do
  redis.call('ZREM', KEYS[2], expired[i])
  redis.call('ZADD', KEYS[1], expired[i + 1], expired[i])
end

local result = {now, -1, -1, refused, 0}
local vanished = 0
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
for i = 1, #due, 2 do
  local id = due[i]
  redis.call('ZREM', KEYS[1], id)
  local data = redis.call('HGET', KEYS[4], id)
  if data then
    redis.call('ZADD', KEYS[2], now + lease, id)
    local attempt = redis.call('HINCRBY', KEYS[3], id, 1)
    table.insert(result, id)
    table.insert(result, attempt)
    table.insert(result, due[i + 1])
    table.insert(result, data)
  else
    redis.call('HDEL', KEYS[3], id)
    redis.call('HDEL', KEYS[5], id)
    vanished = vanished + 1
  end
end
result[5] = vanished
result[2] = head(KEYS[1]) or -1
result[3] = head(KEYS[2]) or -1
return result
