-- claim.lua: acknowledges a consumer's finished messages, makes messages whose lease expired due
-- again, and claims up to N due messages for the next attempt, leasing each for the lease
-- timeout. Due messages are claimed in due-time order, ties in publish order. A message without a
-- key may be claimed up to ARGV[6] before its due time, so that its consumer holds it when it
-- falls due rather than asking Redis then (the consumer hands it out at its due time on the
-- Redis clock, see Ahead in consume.go); a keyed message only once it is due, so that a
-- replace, a debounce update or a cancel by key before its due time always finds it waiting.
--
-- Each claim carries a token, and the subscription keeps its last claim in a record: the token
-- and the lease deadline the claim gave. Scripts run one at a time and each reads the clock
-- anew, so no other script gives the same deadline: the claim's messages are the lease members
-- scored exactly at it. A claim whose token is in the record already ran and its reply was
-- lost: it is answered again with those messages still so leased, and nothing is written, so
-- a lost reply costs no attempt. Their due time is then given as the latest the claim could
-- take (the record's third field, its time and ahead), or the claim time without one: no
-- earlier than any of them was due. (A consumer of the group with another lease timeout could
-- give the same deadline to the microsecond; a replay would then hand out its message too: a
-- duplicate at worst, never a loss.)
--
-- fragments: int, now_us, split, each_chunk, far, stored, head, drop, ack, close_batch, lease_marker, born_after
-- KEYS[1] due       zset    member (see scripts.go) -> due time (µs)
-- KEYS[2] lease     zset    ID:attempt -> lease deadline (µs)
-- KEYS[3] messages  hash    field (see scripts.go) -> marshaled message
-- KEYS[4] refs      hash    field -> groups still holding it
-- KEYS[5] record    string  the subscription's last claim: "token deadline", and " upto" when
--                           it claimed ahead (the latest due time it could take, µs)
-- KEYS[6] keyed     hash    the group's keyed messages once claimed: key -> ID:attempt
-- KEYS[7] history   prefix  of the history keys of keyed messages (see ended in lib)
-- KEYS[8] paused    string  exists while the group is paused: acks are confirmed, nothing is
--                           claimed, and no next due time is given (Resume wakes the group)
-- KEYS[9] batches   hash    batch key -> "hex count bytes due" of its open batch: a claimed
--                           batch is closed (close_batch)
-- KEYS[10] epoch    string  the group's registration (see register.lua)
-- KEYS[11] far      zset    the group's compact tier (see far): each claim first moves up to
--                           FAR_STEP messages whose bucket's time has come into the due set
-- KEYS[12] seq      string  the topic's ID counter, read only when the epoch is not ARGV[5]
-- ARGV[1] N, the most messages to claim
-- ARGV[2] lease timeout in µs
-- ARGV[3] the claim's token
-- ARGV[4] the group's name
-- ARGV[5] the group's epoch when the subscription registered it
-- ARGV[6] how long before its due time a message without a key may be claimed, µs (0: none)
-- ARGV[7..] lease members (ID:attempt) the caller acked
--
-- Returns {-1} when the group's epoch is not ARGV[5]: the group was removed since (and maybe
-- registered anew), so nothing is acked or claimed and the subscription stops; {-2} when
-- Redis lost the data of the registration instead (the ID counter is younger than the epoch,
-- or gone, see born_after), so nothing is acked or claimed and the subscription registers
-- the group again. Else {now µs (as the script ends when ARGV[6] is not 0), next claim µs or
--          -1, next lease deadline µs or -1, {IDs whose ack was refused},
--          vanished count, expired lease count, claim time µs, then per claimed message: ID,
--          attempt, due µs, marshaled message}. The claim time is now, or, for a claim
--          answered again from its record, the time of the claim that ran (its deadline minus
--          the lease): deliver-by deadlines are checked against it. The next claim is the
--          earliest due time left, less ARGV[6] when its message has no key, or the compact
--          tier's next bucket move when that comes first.
-- An ack is refused when its lease was lost (fencing). A claimed ID whose stored message has
-- vanished is dropped from the group and counted as vanished; a malformed member is dropped
-- and counted likewise.

-- ARGV[1], the claim size, goes to each LIMIT as it came, and ranks as text literals: Redis 7.0
-- formats a number argument with printf's %.17g, about 2k instructions each.
local lease = tonumber(ARGV[2])
local token = ARGV[3]
local ahead = tonumber(ARGV[6])
local group = {keyed = KEYS[6], history = KEYS[7], name = ARGV[4]}
local now = now_us()

-- FAR_STEP is the most messages a claim moves from the compact tier into the due set: a bucket
-- moves at least one horizon before its first message is due, in as many claims as it takes
-- (a claim that leaves some asks for the next at once, see finish).
local FAR_STEP = 500

-- finish gives the next claim time: the due set's earliest due time (less the ahead for a
-- message without a key), or the compact tier's next bucket move when that comes first, so that
-- the subscription claims (and moves it) then. move is the compact tier's earliest move time
-- when the claim has read it (see far_promote).
local function finish(result, move)
  local first = redis.call('ZRANGE', KEYS[1], '0', '0', 'WITHSCORES')
  local due = tonumber(first[2])
  -- Only a keyed member has "=" after its ID.
  if due and string.byte(first[1], 13) ~= 61 then due = due - ahead end
  if move == false then move = head(KEYS[11]) end
  if move and (due == nil or move < due) then due = move end
  result[2] = due or -1
  result[3] = head(KEYS[2]) or -1
  -- A claim that takes messages ahead gives the clock as it ends: its consumer holds them
  -- until the Redis clock has surely read their due time, bounded by this reading and the
  -- arrival of the reply (see redisclock.go).
  if ahead > 0 then result[1] = now_us() end
  return result
end

if redis.call('GET', KEYS[10]) ~= ARGV[5] then
  if born_after(KEYS[12], ARGV[5]) then return {-2} end
  return {-1}
end

local record = redis.call('GET', KEYS[5])
if record and string.sub(record, 1, #token + 1) == token .. ' ' then
  local deadline, upto = string.match(string.sub(record, #token + 2), '^(%d+) ?(%d*)$')
  local leased = redis.call('ZRANGEBYSCORE', KEYS[2], deadline, deadline)
  local ids = {}
  for i, m in ipairs(leased) do ids[i] = (split(m)) end
  local claimed_at = tonumber(deadline) - lease
  local result = {now, -1, -1, {}, 0, 0, claimed_at}
  local data = stored(KEYS[3], ids)
  for i, m in ipairs(leased) do
    if data[i] then
      local id, attempt = split(m)
      result[#result + 1] = id
      result[#result + 1] = attempt
      result[#result + 1] = tonumber(upto) or claimed_at
      result[#result + 1] = data[i]
    end
  end
  return finish(result, false)
end

local acked = {}
for i = 7, #ARGV do acked[#acked + 1] = ARGV[i] end
local refused = ack(KEYS[2], KEYS[3], KEYS[4], group, acked, 'acked')
if redis.call('EXISTS', KEYS[8]) == 1 then return {now, -1, -1, refused, 0, 0, now} end

-- An expired lease puts the message back at its lease deadline, which is in the past, so it is
-- claimed before messages that came due later; its member keeps the attempt count.
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'WITHSCORES', 'LIMIT', '0', ARGV[1])
if #expired > 0 then
  local back = {}
  for i = 1, #expired, 2 do
    back[#back + 1] = expired[i + 1]
    back[#back + 1] = expired[i]
  end
  -- They are the set's first members by rank (the marker sorts last): a range removal spares
  -- a lookup per member.
  redis.call('ZREMRANGEBYRANK', KEYS[2], '0', #expired / 2 - 1)
  each_chunk('ZADD', KEYS[1], back)
end

-- A bucket left unfinished holds messages due from its start on: until it is moved, only
-- messages due before that are claimed, so that claims keep due-time order.
local unmoved, move = far_promote(KEYS[1], KEYS[11], now, FAR_STEP)
local upto = now + ahead
if unmoved and unmoved <= upto then upto = '(' .. int(unmoved) end

local result = {now, -1, -1, refused, 0, #expired / 2, now}
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', upto, 'WITHSCORES', 'LIMIT', '0', ARGV[1])
if #due == 0 then return finish(result, move) end

local ids, attempts, scores, embedded, moved, malformed = {}, {}, {}, {}, {}, 0
local taken = #due / 2
for i = 1, #due, 2 do
  local id, n, message = split(due[i])
  -- A keyed ID is longer than 12 digits: it waits until it is due, and what follows it too.
  if ahead > 0 and #id > 12 and tonumber(due[i + 1]) > now then
    taken = (i - 1) / 2
    break
  end
  if n == nil or not string.find(id, '^%x%x%x%x%x%x%x%x%x%x%x%x') then
    malformed = malformed + 1
  else
    ids[#ids + 1] = id
    attempts[#ids] = n + 1
    scores[#ids] = due[i + 1]
    embedded[#ids] = message
    if message then
      moved[#moved + 1] = id
      moved[#moved + 1] = message
    end
  end
end
-- The claimed members are the set's first by rank: removing the range spares a lookup per
-- member, which in a set of millions is a cache miss or two each.
if taken == 0 then return finish(result, move) end
redis.call('ZREMRANGEBYRANK', KEYS[1], '0', taken - 1)
-- A claimed message lives in the messages hash until its group is done with it.
if #moved > 0 then each_chunk('HSET', KEYS[3], moved) end
-- A batch still open closes before its stored value is read (see close_batch).
for _, id in ipairs(ids) do
  -- Only a batch's ID, its hex digits, "=" and \1, can name an open batch (and a plain ID's
  -- length tells it is none without a call).
  if #id > 12 and string.byte(id, 14) == 1 and string.byte(id, 13) == 61 then close_batch(KEYS[9], KEYS[3], id) end
end
local data = {}
if #moved < 2 * #ids then data = stored(KEYS[3], ids) end
for i = 1, #ids do
  if embedded[i] then data[i] = embedded[i] end
end
local leases, vanished, keyed = {}, {}, {}
-- One string for the deadline of every lease: Redis would convert a number argument anew each time.
local deadline = int(now + lease)
-- The text of each attempt count, once per claim (a lease's member is its ID, ":" and its
-- attempt count, see member): the claimed messages share a few counts, mostly 1.
local counts = {}
for i, id in ipairs(ids) do
  if data[i] then
    local attempt_text = counts[attempts[i]]
    if not attempt_text then
      attempt_text = int(attempts[i])
      counts[attempts[i]] = attempt_text
    end
    local m = id .. ':' .. attempt_text
    leases[#leases + 1] = deadline
    leases[#leases + 1] = m
    local key = key_of(id)
    if key then
      keyed[#keyed + 1] = key
      keyed[#keyed + 1] = m
    end
    result[#result + 1] = id
    result[#result + 1] = attempts[i]
    result[#result + 1] = scores[i]
    result[#result + 1] = data[i]
  elseif string.sub(id, 13, 13) == '=' then
    -- The key's field holds no message, or another message with the key: it is not this
    -- member's to drop.
    malformed = malformed + 1
  else
    vanished[#vanished + 1] = id
  end
end
if #keyed > 0 then each_chunk('HSET', KEYS[6], keyed) end
if #leases > 0 then
  -- The marker (see scripts.go) keeps the lease set in Redis's skiplist encoding.
  leases[#leases + 1] = '+inf'
  leases[#leases + 1] = lease_marker(ARGV[5])
  each_chunk('ZADD', KEYS[2], leases)
  -- The record read above is done with: it takes the new claim.
  record = token .. ' ' .. deadline
  if ahead > 0 then record = record .. ' ' .. int(now + ahead) end
  redis.call('SET', KEYS[5], record, 'PX', math.max(1, math.ceil(lease / 1000)))
end
drop(KEYS[3], KEYS[4], vanished, KEYS[7])
result[5] = #vanished + malformed
return finish(result, move)
