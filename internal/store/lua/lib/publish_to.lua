-- fragment publish_to; needs: now_us, next_ids, each_chunk, hmget, far, head, schedule, wake, locate, stale, drop_parked, seal_batch
-- publish_to stores messages once and schedules each for every consumer group registered on a
-- topic: in the messages hash, or, with one group and at most MAX_EMBEDDED bytes, in the due
-- member itself (a larger member would make every ZRANGE of the set's head copy it). The
-- topic's keys start at KEYS[k]: call (string, this publish call's token), seq (string),
-- messages (hash), refs (hash), groups (set), parked (sorted set), the prefix of history keys,
-- batches (hash: batch key -> "hex count bytes due" of its open batch), window (hash: exists
-- while the topic's new-group window is open, "" holding its cap; see register.lua), the prefix
-- of debounce caps (see below), then one due sorted set per group, then one keyed hash per
-- group, then one compact-tier index per group (see far), then one epoch per group. Its
-- arguments start at
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
-- Debounce with a cap: a keep-later (>) message with a max wait is never due later than its
-- key's cap. Stored fresh, it sets the cap to now + max wait and its due time to at most that;
-- a keep-later duplicate is first pulled back to the message's cap (set to now + its own max
-- wait when there is none yet and it has one: the existing message asked for none), then
-- replaces the existing message only when still later than its earliest due time. A cap once
-- set is not moved by later publishes, whatever their max wait. The cap lives in the debounce
-- key of the key as "ID cap", valid for the message with that ID only (a message of the same
-- key published after this one is done starts afresh), and expires by itself a max wait after
-- the cap: by then the message has normally been claimed, and once claimed it can no longer be
-- replaced.
--
-- A batch is a keyed message whose key is "\1", the batch key, "\1" and its ID's hex digits;
-- its stored value is those hex digits, a trigger letter (t time, s size, f flush) and its items,
-- each as its length in decimal, ":" and the item. While it is open, each item waits in a field
-- of its own and the value gets them when the batch closes (seal_batch). The first item opens a
-- batch, scheduled MaxWait after it in every group; the item that fills it releases it at once (due now,
-- trigger s), in the groups that hold it: those registered when it opened, which its reference
-- count covers. A batch whose due time has come is closed: the next item opens another; so is
-- one that a group claimed, or that an operation by ref moved or cancelled (close_batch).
--
-- A keyed message is never embedded: it lives in the messages hash under "=" and its key, its
-- ID's 12 hex digits before the marshaled message, so that the key finds it. Its ID is the hex
-- digits, "=" and the key. While the field exists the key is taken, and while its history key
-- exists (for the retention after the message is done) too: a message with a taken key is a
-- duplicate, or replaces the message where the policy says so. Replacing writes the new
-- message in place and moves the due time in every group where the message is due; groups that
-- hold it in flight see the new message on their next attempt.
--
-- With G = 0, no group is registered yet: the messages wait in the parked set, in the
-- single-group form, until the first group registers and takes the set over (register.lua).
-- While the new-group window is open (the window key exists, see register.lua), the messages
-- also go to the parked set, so that a group that registers within the window receives them:
-- they are then never embedded, and the parked set counts as one holder in refs. The window
-- never holds a message key: its copy of a keyed message (parked as ID:0) is a copy of the
-- message under the plain ID, its 12 hex digits (see window_id), counted in refs apart from
-- the key's field, so that the key is free once the registered groups are done with it; a
-- replace writes both. A publish that would take the parked set past the window's cap closes
-- the window early. Once the window has closed, each publish drops up to PARKED_DROP members of
-- what it left (see drop_parked).
--
-- The call key makes a second run of the same call (a client retry after a lost reply) store
-- nothing more: it holds the first run's reply.
--
-- Returns {1, first ID, outcomes}, outcomes holding one letter per message: s scheduled, d
-- duplicate (nothing stored), r replaced. Returns {0, group...} when the caller's view of the
-- groups is stale; nothing is written then, and the caller retries with the listed groups.
local MAX_EMBEDDED = 1024
-- PARKED_DROP is how many members of a closed window's parked set each publish drops.
local PARKED_DROP = 100
-- BATCH brackets the batch key in the key part of a batch's ID: "=", BATCH, the batch key,
-- BATCH and the batch's hex digits (message keys hold no control characters).
local BATCH = '\1'

local function publish_to(k, a)
  local call, seq, messages, refs, groups, parked, history, batches, window, debounce =
    KEYS[k], KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], KEYS[k + 5], KEYS[k + 6], KEYS[k + 7], KEYS[k + 8],
    KEYS[k + 9]
  local ttl, ngroups = ARGV[a], tonumber(ARGV[a + 1])
  local done = redis.call('GET', call)
  if done then
    local space = string.find(done, ' ', 1, true)
    return {1, string.sub(done, 1, space - 1), string.sub(done, space + 1)}
  end
  local now = now_us()
  local fence = string.find(ttl, '<', 1, true)
  if fence then
    if now > tonumber(string.sub(ttl, fence + 1)) then return {-2} end
    ttl = string.sub(ttl, 1, fence - 1)
  end
  local horizon, cut = nil, string.find(ttl, '>', 1, true)
  if cut then
    horizon = tonumber(string.sub(ttl, cut + 1))
    ttl = string.sub(ttl, 1, cut - 1)
  end
  local wrong = stale(groups, a + 2, ngroups)
  if wrong then return wrong end

  local first = a + 2 + 2 * ngroups
  local count = (#ARGV - first + 1) / 3

  -- parking: the messages go to the parked set too (see above); holders is how many sets hold
  -- each message, which refs counts while it is more than one.
  local parking, holders = ngroups == 0, ngroups
  if ngroups > 0 then
    local cap = redis.call('HGET', window, '')
    if cap and redis.call('ZCARD', parked) + count > tonumber(cap) then
      redis.call('DEL', window)
    elseif cap then
      parking, holders = true, ngroups + 1
    end
    if not parking then drop_parked(parked, messages, refs, history, PARKED_DROP) end
  end

  -- fresh[key] is the index in scheduled of the score of a keyed message this call stores.
  -- later holds the score/member pairs for the compact tier.
  -- copies[key] is true when this call stored a keyed message with the window's copy (see
  -- window above).
  local hashed, scheduled, counted, fresh, outcomes, later, copies = {}, {}, {}, {}, {}, {}, {}

  -- set_cap records cap (Unix µs) as the debounce cap of the message with key and hex ID, kept
  -- max_wait µs past the cap, and returns it.
  local function set_cap(key, hex, cap, max_wait)
    redis.call('SET', debounce .. key, hex .. ' ' .. int(cap), 'PXAT',
      int(math.floor((cap + max_wait) / 1000) + 1))
    return cap
  end

  -- duplicate settles a message whose key is taken by the message in `existing` (its field's
  -- value) and returns its outcome letter. max_wait (µs) is the new message's max wait, nil
  -- for none.
  local function duplicate(policy, key, existing, data, score, max_wait)
    if policy == 'k' then return 'd' end
    local hex = string.sub(existing, 1, 12)
    local id = hex .. '=' .. key
    local at, earliest = {}, nil
    if fresh[key] then
      earliest = scheduled[fresh[key]]
    elseif ngroups == 0 then
      earliest = tonumber(redis.call('ZSCORE', parked, id .. ':0'))
    else
      for g = 1, ngroups do
        local where, m, s = locate(KEYS[k + 9 + g], nil, KEYS[k + 9 + ngroups + g], id)
        if where then
          at[#at + 1] = {g, m}
          if earliest == nil or s < earliest then earliest = s end
        end
      end
    end
    if earliest == nil then return 'd' end
    if policy == '>' then
      local rec = redis.call('GET', debounce .. key)
      local cap = rec and string.sub(rec, 1, 12) == hex and tonumber(string.sub(rec, 14))
      if not cap and max_wait then cap = set_cap(key, hex, now + max_wait, max_wait) end
      if cap then score = math.min(score, cap) end
    end
    if (policy == '<' and score >= earliest) or (policy == '>' and score <= earliest) then
      return 'd'
    end
    -- The window's copy, if the message has one (see window above), is replaced too.
    local copy = copies[key]
    if not fresh[key] and parking and ngroups > 0 then copy = redis.call('ZSCORE', parked, id .. ':0') end
    if copy then
      redis.call('HSET', messages, '=' .. key, hex .. data, hex, data)
    else
      redis.call('HSET', messages, '=' .. key, hex .. data)
    end
    if fresh[key] then
      scheduled[fresh[key]] = score
    else
      for _, g in ipairs(at) do
        schedule(KEYS[k + 9 + g[1]], ARGV[a + 1 + ngroups + g[1]], {score, g[2]}, score)
      end
      if parking then redis.call('ZADD', parked, 'XX', score, id .. ':0') end
    end
    return 'r'
  end

  -- open_batches[bk] is the open batch of batch key bk once this call has looked at it (false:
  -- none): {hex, hfield, n items, size bytes, due µs, slot in scheduled if opened here}.
  -- found[bk] is bk's batches entry as the call found it, parsed, with live set when its batch
  -- was still open (due later, its field there): read for all the call's batch keys at once by
  -- find_batches, two HMGETs per call rather than two reads per item. pending holds the
  -- field/value pairs of items (and of batches opened) not written yet: one HSET per call, or
  -- before a batch closes (write_pending), since sealing reads them.
  local open_batches, found, pending = {}, nil, {}

  local function write_pending()
    if #pending > 0 then each_chunk('HSET', messages, pending) end
    pending = {}
  end

  local function find_batches()
    found = {}
    local keys, entries, live, fields = {}, {}, {}, {}
    for i = 0, count - 1 do
      local spec = ARGV[first + 3 * i + 2]
      if string.sub(spec, 1, 1) == 'B' then
        local bk = string.sub(spec, string.find(spec, '=', 2, true) + 1)
        if entries[bk] == nil then entries[bk], keys[#keys + 1] = true, bk end
      end
    end
    for i, entry in ipairs(hmget(batches, keys)) do
      local hex, n, size, due = string.match(entry or '', '^(%x+) (%d+) (%d+) (%d+)$')
      if hex then
        local bk = keys[i]
        local b = {hex = hex, hfield = '=' .. BATCH .. bk .. BATCH .. hex, n = tonumber(n), size = tonumber(size), due = tonumber(due)}
        found[bk] = b
        if b.due > now then live[#live + 1], fields[#fields + 1] = b, b.hfield end
      end
    end
    for i, value in ipairs(hmget(messages, fields)) do live[i].live = value ~= false end
  end

  -- release_full releases batch b of batch key bk, full, now (trigger s), and ends its open
  -- state.
  local function release_full(bk, b)
    seal_batch(messages, b.hfield, b.n, 's')
    if b.slot then
      scheduled[b.slot] = now
    else
      -- The batch goes to the groups registered when it opened, which its reference count
      -- covers: it moves where it is (XX), and a group that registered since gets nothing.
      local m = b.hex .. b.hfield .. ':0'
      redis.call('ZADD', parked, 'XX', now, m)
      for g = 1, ngroups do
        if redis.call('ZADD', KEYS[k + 9 + g], 'XX', 'CH', now, m) == 1 then
          wake(ARGV[a + 1 + ngroups + g], nil, now)
        end
      end
    end
    redis.call('HDEL', batches, bk)
  end

  -- batch_item adds an item to its batch key's open batch, opening one (scheduled MaxWait from
  -- now, with the item's ID) when there is none, and releasing it now when it is full. The item
  -- goes into a field of its own until the batch closes (see seal_batch): O(item), whatever the
  -- batch holds. A batch whose due time has passed, unclaimed, is sealed here before the next
  -- opens.
  local function batch_item(spec, data, id)
    local eq = string.find(spec, '=', 2, true)
    local max_items, max_wait, max_bytes = string.match(string.sub(spec, 2, eq - 1), '^(%d+) (%d+) (%d+)$')
    max_items, max_wait, max_bytes = tonumber(max_items), tonumber(max_wait), tonumber(max_bytes)
    local bk = string.sub(spec, eq + 1)
    local b = open_batches[bk]
    if b == nil then
      if not found then find_batches() end
      b = found[bk] or false
      if b and not b.live then
        seal_batch(messages, b.hfield, b.n, 't')
        b = false
      end
    end
    if not b then
      b = {hex = id, hfield = '=' .. BATCH .. bk .. BATCH .. id, n = 0, size = 0, due = now + max_wait}
      pending[#pending + 1] = b.hfield
      pending[#pending + 1] = id .. 't'
      if holders > 1 then
        counted[#counted + 1] = b.hfield
        counted[#counted + 1] = holders
      end
      scheduled[#scheduled + 1] = b.due
      b.slot = #scheduled
      scheduled[#scheduled + 1] = b.hex .. b.hfield .. ':0'
    end
    b.n, b.size = b.n + 1, b.size + #data
    pending[#pending + 1] = b.hfield .. BATCH .. int(b.n)
    pending[#pending + 1] = int(#data) .. ':' .. data
    if b.n >= max_items or (max_bytes > 0 and b.size >= max_bytes) then
      write_pending()
      release_full(bk, b)
      b = false
    end
    open_batches[bk] = b
  end

  local last_id = next_ids(seq, count)
  local first_id = string.format('%012x', last_id - count + 1)
  -- plain counts the messages without a key spec so far: while all are, outcomes stays empty
  -- and the reply is that many 's'.
  local plain = 0
  local now_s = int(now)
  local embed = holders <= 1
  for i = 0, count - 1 do
    local id = string.format('%012x', last_id - count + 1 + i)
    local at = first + 3 * i
    local data, schedule, spec = ARGV[at], ARGV[at + 1], ARGV[at + 2]
    local score
    if schedule == '0' then
      score = now
    elseif string.sub(schedule, 1, 1) == '@' then
      score = math.max(tonumber(string.sub(schedule, 2)), now)
    else
      local cap = string.find(schedule, '<', 1, true)
      if cap then
        local latest = tonumber(string.sub(schedule, cap + 1))
        score = math.max(math.min(now + math.max(tonumber(string.sub(schedule, 1, cap - 1)), 0), latest), now)
      else
        score = now + math.max(tonumber(schedule), 0)
      end
    end
    if spec == '' and plain == i then
      plain = i + 1
    elseif plain > 0 then
      outcomes = {string.rep('s', plain)}
      plain = -1
    end
    if spec == '' then
      if plain < 0 then outcomes[#outcomes + 1] = 's' end
      -- A score of now goes as the one string now_s: Redis converts each number argument of a
      -- command to text anew (about 0.3 µs of a batch's time per message).
      local to = scheduled
      if horizon and score - score % horizon - horizon >= now and ngroups > 0 then
        to = later
        to[#to + 1] = score
      elseif score == now then
        to[#to + 1] = now_s
      else
        to[#to + 1] = score
      end
      if embed and #data <= MAX_EMBEDDED then
        to[#to + 1] = id .. '|' .. data
      else
        to[#to + 1] = id
        hashed[#hashed + 1] = id
        hashed[#hashed + 1] = data
        if holders > 1 then
          counted[#counted + 1] = id
          counted[#counted + 1] = holders
        end
      end
    elseif string.sub(spec, 1, 1) == 'B' then
      plain = -1
      outcomes[#outcomes + 1] = 's'
      batch_item(spec, data, id)
    else
      plain = -1
      local policy = string.sub(spec, 1, 1)
      local eq = string.find(spec, '=', 2, true)
      local retention, max_wait = string.match(string.sub(spec, 2, eq - 1), '^(%d+)/?(%d*)$')
      retention, max_wait = tonumber(retention), policy == '>' and tonumber(max_wait) or nil
      local key = string.sub(spec, eq + 1)
      local existing = redis.call('HGET', messages, '=' .. key)
      if existing then
        outcomes[#outcomes + 1] = duplicate(policy, key, existing, data, score, max_wait)
      elseif redis.call('EXISTS', history .. key) == 1 then
        outcomes[#outcomes + 1] = 'd'
      else
        outcomes[#outcomes + 1] = 's'
        local keyholders = holders
        if parking and ngroups > 0 then
          -- The window's copy, under the plain ID: it never holds the key (see window above).
          redis.call('HSET', messages, '=' .. key, id .. data, id, data)
          keyholders, copies[key] = ngroups, true
        else
          redis.call('HSET', messages, '=' .. key, id .. data)
        end
        if keyholders > 1 then
          counted[#counted + 1] = '=' .. key
          counted[#counted + 1] = keyholders
        end
        if retention > 0 then redis.call('HSET', history .. key, '', retention) end
        if max_wait then score = math.min(score, set_cap(key, id, now + max_wait, max_wait)) end
        scheduled[#scheduled + 1] = score
        fresh[key] = #scheduled
        scheduled[#scheduled + 1] = id .. '=' .. key .. ':0'
      end
    end
  end
  local entries = {}
  for bk, b in pairs(open_batches) do
    if b then
      entries[#entries + 1] = bk
      entries[#entries + 1] = b.hex .. ' ' .. int(b.n) .. ' ' .. int(b.size) .. ' ' .. int(b.due)
    end
  end
  if #entries > 0 then each_chunk('HSET', batches, entries) end
  write_pending()
  if #hashed > 0 then each_chunk('HSET', messages, hashed) end
  if #counted > 0 then each_chunk('HSET', refs, counted) end
  if #scheduled > 0 then
    local min_score = nil
    for i = 1, #scheduled, 2 do
      local score = scheduled[i]
      if score == now_s then score = now end
      if min_score == nil or score < min_score then min_score = score end
    end
    if parking then each_chunk('ZADD', parked, scheduled) end
    for g = 1, ngroups do
      schedule(KEYS[k + 9 + g], ARGV[a + 1 + ngroups + g], scheduled, min_score)
    end
  end
  if #later > 0 then
    if parking then each_chunk('ZADD', parked, later) end
    for g = 1, ngroups do
      local epoch = redis.call('GET', KEYS[k + 9 + 3 * ngroups + g])
      local due, far = KEYS[k + 9 + g], KEYS[k + 9 + 2 * ngroups + g]
      if epoch then
        -- The group's subscriptions sleep until its next due time or bucket move: a bucket
        -- that moves before both wakes them (claim.lua moves it).
        local before, move = head(due), head(far)
        if move and (before == nil or move < before) then before = move end
        wake(ARGV[a + 1 + ngroups + g], before, far_put(far, epoch, horizon, later))
      else
        -- A group registered before epochs existed has none: its due set takes them.
        local min_score = later[1]
        for i = 3, #later, 2 do min_score = math.min(min_score, later[i]) end
        schedule(due, ARGV[a + 1 + ngroups + g], later, min_score)
      end
    end
  end
  local reply = plain >= 0 and string.rep('s', plain) or table.concat(outcomes)
  redis.call('SET', call, first_id .. ' ' .. reply, 'PX', ttl)
  return {1, first_id, reply}
end
