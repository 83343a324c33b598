-- fragment publish_to; needs: int, next_ids, stale, each_chunk, schedule, publish_score; loads: publish_call
-- publish_to stores messages once and schedules each for every consumer group registered on a
-- topic. A plain call takes the short path here and pays for no other feature: a call whose
-- messages have no key and are no batch items, without a fence, on a topic with no group yet
-- (its messages wait in the parked set), or with groups and either no new-group window or the
-- window open and room under its cap (the call then parks its messages too, as publish_window
-- says; see call_holders). Every other call goes to publish_call, which load_fragments defines
-- (see scripts.go) and which handles each message by its kind; a plain call that would reach
-- the window's cap, or that finds the leftover of a closed window, reaches it once the clock
-- and the groups are read.
-- A plain call's messages for the compact tier go to publish_far through publish_later, which
-- loads it a level deeper (see scripts.go): a call without such messages does not define the
-- compact tier's functions; a plain call that has some defines them all.
-- A plain call's reply is known before its writes, so its call key is written first, with SET
-- NX GET: one command where a GET before the writes and a SET after them were two. A call that
-- ran already has taken its IDs again by then: they stay unused, a gap in the topic's IDs.
--
-- The topic's keys start at KEYS[k]: call (string, this publish call's token), seq (string),
-- messages (hash), refs (hash), groups (set), parked (sorted set), the prefix of history keys,
-- batches (hash: batch key -> "hex count bytes due" of its open batch), window (hash: exists
-- while the topic's new-group window is open, "" holding its cap; see register.lua), the prefix
-- of debounce caps (see publish_debounce), then one due sorted set per group, then one keyed
-- hash per group, then one compact-tier index per group (see far), then one epoch per group.
-- Its arguments start at
-- ARGV[a]: how long the call's token is kept (ms; then optionally ">" and the compact tier's
-- horizon in µs: a message without a key whose time bucket moves no earlier than now goes to
-- the group's compact tier, see far; then optionally "<" and a Unix time in µs, the call's
-- fence: a call that runs after that time on the Redis clock stores nothing and returns {-2},
-- so that a call held up in the network cannot act once its sender may have been replaced), G,
-- G group names, their G wake channels,
-- then triples of marshaled message, schedule (a delay in µs after now; or "@" and a Unix time
-- in µs, due at once if past; or a delay, "<" and a Unix time in µs it must not pass, due at once
-- if past) and key spec: "" for a message without a key, else the policy
-- for a duplicate (k keep the existing message, r replace it, < keep the earlier due time, >
-- keep the later), the history retention in ms (0: none), optionally "/" and a max wait in µs
-- (read with policy > only), "=" and the key; or, for an item of a batch, "B", MaxItems, " ",
-- MaxWait in µs, " ", MaxBytes (0: none), "=" and the batch key.
--
-- The call key makes a second run of the same call (a client retry after a lost reply) store
-- nothing more: it holds the first run's reply.
--
-- Returns {1, first ID, outcomes}, outcomes holding one letter per message: s scheduled, d
-- duplicate (nothing stored), r replaced; with text true, the outcomes alone. Returns {0,
-- group...} when the caller's view of the groups is stale; nothing is written then, and the
-- caller retries with the listed groups.
-- HEX_DIGITS are the digits of an ID's last place. publish_plain_call formats an ID's first 11
-- hex digits once per 16 IDs and adds the last: a string.format per message was a tenth of a
-- message's time in a batch. A table, not a string to cut: a string call costs Redis about
-- 800 instructions, a message's lookup in the table nothing like it.
local HEX_DIGITS = {'0', '1', '2', '3', '4', '5', '6', '7', '8', '9', 'a', 'b', 'c', 'd', 'e', 'f'}

-- call_holders tells how publish_to's plain call of count messages on the topic of KEYS[k] with
-- n groups stores them (see publish_window): whether the parked set holds them too (no group
-- yet, or the new-group window open with room under its cap); whether a small message may be
-- embedded in its members (it has one holder: no group yet, one group, or one group and the
-- window's copy of its own); and how many holders refs counts for a message in the messages
-- hash, as text (nil for one or none: Redis would format a number with printf for each
-- message). Returns nil when publish_call must take the call: the window at its cap, which
-- the call closes, or the leftover of a closed window, a part of which the call drops.
local function call_holders(k, n, count)
  if n == 0 then return true, true, nil end
  -- Past a topic's first minute neither key exists: one lookup.
  if redis.call('EXISTS', KEYS[k + 8], KEYS[k + 5]) == 0 then
    if n > 1 then return false, false, int(n) end
    return false, true, nil
  end
  local cap = redis.call('HGET', KEYS[k + 8], '')
  if not cap or redis.call('ZCARD', KEYS[k + 5]) + count > tonumber(cap) then return nil end
  -- One group: a small message is embedded in the group's member and in the window's, each a
  -- copy of its own; a large one is hashed, its group and the window counted as holders.
  if n == 1 then return true, true, '2' end
  return true, false, int(n + 1)
end

-- publish_plain_call writes the count messages of publish_to's plain call (from ARGV[first],
-- their IDs base + 1 .. base + count) on the topic of KEYS[k] with its n groups at now (Unix µs):
-- as publish_plain and publish_flush do (see there), with the call's state in locals, and
-- hands the messages for the compact tier (horizon µs, nil without one) to publish_far. With
-- parking, the parked set holds each message too, under the group's member; with embed, a
-- message of at most MAX_EMBEDDED bytes is embedded in it; holders is what refs counts of a
-- message in the messages hash, as text (see call_holders).
local function publish_plain_call(k, a, n, now, horizon, first, base, count, parking, embed, holders)
  local scheduled, hashed, counted, later = {}, nil, nil, nil
  local s, h, l, now_s, min_score, min_m, hex = 0, 0, 0, nil, nil, nil, nil
  for i = 1, count do
    local at = first + 3 * i - 3
    local data, when = ARGV[at], ARGV[at + 1]
    local score = now
    if when ~= '0' then score = publish_score(now, when) end
    local d = (base + i) % 16
    if i == 1 or d == 0 then hex = string.format('%011x', (base + i - d) / 16) end
    local digit, m = HEX_DIGITS[d + 1], nil
    if embed and #data <= MAX_EMBEDDED then
      m = hex .. digit .. '|' .. data
    else
      m = hex .. digit
      hashed = hashed or {}
      hashed[h + 1] = m
      hashed[h + 2] = data
      h = h + 2
      if holders then
        counted = counted or {}
        counted[h - 1] = m
        counted[h] = holders
      end
    end
    if horizon and score - score % horizon - horizon >= now then
      later = later or {}
      later[l + 1] = score
      later[l + 2] = m
      l = l + 2
    else
      if score == now then
        now_s = now_s or int(now)
        scheduled[s + 1] = now_s
      else
        scheduled[s + 1] = int(score)
      end
      scheduled[s + 2] = m
      s = s + 2
      if min_score == nil or score < min_score then min_score, min_m = score, m end
    end
  end
  if hashed then each_chunk('HSET', KEYS[k + 2], hashed) end
  if counted then each_chunk('HSET', KEYS[k + 3], counted) end
  if parking and s > 0 then each_chunk('ZADD', KEYS[k + 5], scheduled) end
  for g = 1, n do
    if s > 0 then schedule(KEYS[k + 9 + g], ARGV[a + 1 + n + g], scheduled, min_score, min_m) end
  end
  if later then
    local p = {later = later, ngroups = n, horizon = horizon, due = {}, far = {}, epoch = {}, channel = {},
      parking = parking, parked = KEYS[k + 5]}
    for g = 1, n do
      p.due[g], p.far[g], p.epoch[g] = KEYS[k + 9 + g], KEYS[k + 9 + 2 * n + g], KEYS[k + 9 + 3 * n + g]
      p.channel[g] = ARGV[a + 1 + n + g]
    end
    load_fragments().publish_later(p)
  end
end

local function publish_to(k, a, text)
  local ttl, n = ARGV[a], tonumber(ARGV[a + 1])
  local first = a + 2 + 2 * n
  local plain = not string.find(ttl, '<', 1, true)
  for at = first + 2, #ARGV, 3 do
    if ARGV[at] ~= '' then plain = false break end
  end
  if not plain then return load_fragments().publish_call(k, a, nil, text) end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local refused = stale(KEYS[k + 4], a + 2, n)
  if refused then return refused end
  local count = (#ARGV - first + 1) / 3
  local parking, embed, holders = call_holders(k, n, count)
  if parking == nil then return load_fragments().publish_call(k, a, now, text) end
  local base = next_ids(KEYS[k + 1], count) - count
  local first_id, reply = string.format('%012x', base + 1), string.rep('s', count)
  local horizon, cut = nil, string.find(ttl, '>', 1, true)
  if cut then horizon, ttl = tonumber(string.sub(ttl, cut + 1)), string.sub(ttl, 1, cut - 1) end
  if n == 0 then horizon = nil end -- the compact tier is a group's: parked messages stay whole
  local done = redis.call('SET', KEYS[k], first_id .. ' ' .. reply, 'NX', 'GET', 'PX', ttl)
  if done then
    local space = string.find(done, ' ', 1, true)
    if text then return string.sub(done, space + 1) end
    return {1, string.sub(done, 1, space - 1), string.sub(done, space + 1)}
  end
  publish_plain_call(k, a, n, now, horizon, first, base, count, parking, embed, holders)
  if text then return reply end
  return {1, first_id, reply}
end
