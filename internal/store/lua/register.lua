-- register.lua: registers a consumer group on a topic and returns the group's registration, its
-- epoch: an ID drawn from the topic's ID counter when the group is registered anew, kept while
-- it stays registered. A subscription names the epoch in every claim (claim.lua), so that once
-- the group is removed (removegroup.lua deletes the epoch) the subscription stops instead of
-- claiming for a group that a later registration started afresh. Registering a group that is
-- already registered writes nothing, so it works on a Redis that is full; only a group
-- registered before epochs existed gets one then.
--
-- The first group registered on a topic receives the messages published while the topic had
-- no group (the parked set). With a new-group window (ARGV[3] > 0), the first group opens it:
-- the window key exists for that long, and until it expires the parked set keeps those messages
-- and every message published meanwhile (see publish_window), and every group that registers
-- within it receives a copy of each, at its original due time. The parked set holds a small
-- message of a single-group topic as a copy of its own, embedded in its member; any other
-- message it counts as one holder of in refs; of a keyed message, it holds the window's copy
-- under the plain ID, never the key (see receive and publish_window), so that the key is free
-- once the registered groups are done with the message. Without a window, or when the parked
-- set holds more than the cap, the first group takes the parked set over (RENAME) and no
-- window opens. A group that registers once the window has closed receives nothing of the
-- past, and drops up to DROP_ON_REGISTER members of what the window left (see drop_parked).
--
-- fragments: next_ids, split, hmget, each_chunk, head, wake, drop_parked, move_set
-- KEYS[1] groups    set     registered consumer groups
-- KEYS[2] parked    zset    messages waiting for a first group or kept by the window
-- KEYS[3] due       zset    the group's due set
-- KEYS[4] window    hash    exists while the new-group window is open: "" -> its cap, and each
--                           group that registered within it -> 1 (a group removed and
--                           registered again within the window is not given its messages again)
-- KEYS[5] refs      hash    field -> holders of the message, while more than one
-- KEYS[6] messages  hash    field (see scripts.go) -> marshaled message
-- KEYS[7] history   prefix  of the history keys of keyed messages
-- KEYS[8] seq       string  the topic's ID counter
-- KEYS[9] epoch     string  the group's epoch
-- ARGV[1] group name
-- ARGV[2] the group's wake channel
-- ARGV[3] the window's length in ms, 0 for none (used when this is the first group)
-- ARGV[4] the window's cap: the most messages its parked set may hold
--
-- Returns {code, ms left of the window or -1 when none is open, the group's epoch}: code 0 when
-- the group was registered already, 1 when it is now, 2 when it is now and received messages.

-- DROP_ON_REGISTER is how many members of a closed window's parked set a registration drops.
local DROP_ON_REGISTER = 1000

local groups, parked, due, window, refs, messages, history =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local name, channel, length, cap = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])

local function new_epoch()
  local epoch = string.format('%012x', next_ids(KEYS[8], 1))
  redis.call('SET', KEYS[9], epoch)
  return epoch
end

local function window_left()
  local left = redis.call('PTTL', window)
  if left < 0 then return -1 end
  return left
end

-- receive copies the parked set's members into the group's due set at their scores. A member
-- that embeds its message (ID|message: parked before any group, or the window's copy of a
-- single-group topic's message) is a copy of its own, which no other set holds: the first
-- group receives it as it is, a later one under a new ID of its own, so that no two groups hold
-- one ID without refs counting them. Of any other member, the message is in the messages hash,
-- and the group counts as one more holder of it (a message without a refs field has one). The
-- window never holds a message key (see publish_window): the first group takes over the parked
-- set's hold of a keyed message parked before it, and the window keeps a copy under the plain
-- ID (window_id); a later group joins a keyed message while its key's field holds it (a group
-- still holds it), and otherwise receives the window's plain copy.
local function receive(first)
  local entries = redis.call('ZRANGE', parked, 0, -1, 'WITHSCORES')
  local copies, own, fresh, hashed, keyed = {}, {}, {}, {}, {}
  for i = 1, #entries, 2 do
    local m, score = entries[i], entries[i + 1]
    local id, _, message = split(m)
    copies[#copies + 1] = score
    copies[#copies + 1] = m
    if message then
      own[#copies] = message
      if not first then fresh[#fresh + 1] = #copies end
    elseif window_id(id) ~= id then
      keyed[#keyed + 1] = #copies
    end
  end
  if #copies == 0 then return false end
  if #fresh > 0 then
    local last = next_ids(KEYS[8], #fresh)
    for j, i in ipairs(fresh) do
      local data = own[i]
      copies[i] = string.format('%012x', last - #fresh + j) .. '|' .. data
    end
  end
  local fields, taken = {}, {}
  for j, i in ipairs(keyed) do fields[j] = field((split(copies[i]))) end
  for j, value in ipairs(#fields > 0 and hmget(messages, fields) or {}) do
    local i = keyed[j]
    local hex = string.sub(copies[i], 1, 12)
    local live = value and string.sub(value, 1, 12) == hex
    if first then
      taken[i] = true
      if live then
        hashed[#hashed + 1] = hex
        hashed[#hashed + 1] = string.sub(value, 13)
      end
    elseif not live then
      copies[i] = hex
    end
  end
  local counting = {}
  for i = 2, #copies, 2 do
    if not taken[i] and not own[i] then counting[#counting + 1] = field((split(copies[i]))) end
  end
  local counted = {}
  for i, f in ipairs(#counting > 0 and hmget(refs, counting) or {}) do
    counted[#counted + 1] = counting[i]
    counted[#counted + 1] = (tonumber(f) or 1) + 1
  end
  if #hashed > 0 then each_chunk('HSET', messages, hashed) end
  if #counted > 0 then each_chunk('HSET', refs, counted) end
  each_chunk('ZADD', due, copies)
  return true
end

if redis.call('SISMEMBER', groups, name) == 1 then
  return {0, window_left(), redis.call('GET', KEYS[9]) or new_epoch()}
end
local received = false
if redis.call('SCARD', groups) == 0 then
  if length > 0 and redis.call('ZCARD', parked) <= cap then
    redis.call('HSET', window, '', cap, name, 1)
    redis.call('PEXPIRE', window, length)
    received = receive(true)
  else
    received = move_set(parked, due)
  end
elseif redis.call('EXISTS', window) == 1 then
  if redis.call('HEXISTS', window, name) == 1 then
    -- Removed and registered again within the window: it starts empty, as after any removal.
  elseif redis.call('ZCARD', parked) <= cap then
    redis.call('HSET', window, name, 1)
    received = receive(false)
  else
    redis.call('DEL', window)
  end
else
  drop_parked(parked, messages, refs, history, DROP_ON_REGISTER)
end
redis.call('SADD', groups, name)
if received then wake(channel, nil, head(due)) end
if received then return {2, window_left(), new_epoch()} end
return {1, window_left(), new_epoch()}
