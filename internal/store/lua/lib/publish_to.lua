-- fragment publish_to; needs: int, now_us, next_ids, stale, publish_window, publish_plain, publish_flush; loads: publish_keyed, publish_batch, publish_far
-- publish_to stores messages once and schedules each for every consumer group registered on a
-- topic. It is a dispatcher: it reads the call, then hands each message to the fragment of its
-- kind, and writes what they gathered at the end, so that a message without a key or a batch
-- takes the short path (publish_plain, publish_flush) and pays for no other feature:
--
--	publish_window     the parked set: no group yet, or the new-group window open
--	publish_plain      a message without a key: due sets, embedded member or hash, compact tier
--	publish_keyed      a keyed message: stored, or a duplicate (publish_duplicate: keep the
--	                   existing, the earlier or the later due time, with publish_debounce's cap;
--	                   publish_replace writes a replacement)
--	publish_batch      an item of a batch
--	publish_flush      the writes gathered for the due sets, the parked set, the hashes
--	publish_far        the messages for the compact tier (see far)
--
-- They share the call's state p: its keys, p.now (Unix µs), the holders of each message (see
-- publish_window) and the writes gathered so far (p.scheduled: score/member pairs for every due
-- set; p.later: those for the compact tier; p.hashed and p.counted: field/value pairs for the
-- messages hash and refs, the keyed messages' fields among them; p.taken and p.past: what the
-- call knows of its keys, read once, see keys_find).
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
-- duplicate (nothing stored), r replaced. Returns {0, group...} when the caller's view of the
-- groups is stale; nothing is written then, and the caller retries with the listed groups.

-- publish_ttl reads the call's first argument, ttl, into p.ttl and p.horizon. Returns {-2} when
-- the call's fence has passed, else nil.
local function publish_ttl(p, ttl)
  local fence = string.find(ttl, '<', 1, true)
  if fence then
    if p.now > tonumber(string.sub(ttl, fence + 1)) then return {-2} end
    ttl = string.sub(ttl, 1, fence - 1)
  end
  local cut = string.find(ttl, '>', 1, true)
  if cut then
    p.horizon = tonumber(string.sub(ttl, cut + 1))
    ttl = string.sub(ttl, 1, cut - 1)
  end
  p.ttl = ttl
  return nil
end

-- publish_score returns the due time (Unix µs) of a message with schedule `when` (see above)
-- published at now.
local function publish_score(now, when)
  if when == '0' then return now end
  if string.sub(when, 1, 1) == '@' then return math.max(tonumber(string.sub(when, 2)), now) end
  local cap = string.find(when, '<', 1, true)
  if not cap then return now + math.max(tonumber(when), 0) end
  local latest = tonumber(string.sub(when, cap + 1))
  return math.max(math.min(now + math.max(tonumber(string.sub(when, 1, cap - 1)), 0), latest), now)
end

-- publish_lazy returns the fragments only some calls use (see load_fragments), once publish_to's
-- call p has what they need too: each group's keyed hash, compact tier and epoch, and the
-- tables of the call's keyed messages. A plain call builds none of them.
local function publish_lazy(p)
  if not p.keyed then
    local k, n = p.k, p.ngroups
    p.keyed, p.far, p.epoch, p.fresh, p.copies = {}, {}, {}, {}, {}
    for g = 1, n do
      p.keyed[g], p.far[g], p.epoch[g] = KEYS[k + 9 + n + g], KEYS[k + 9 + 2 * n + g], KEYS[k + 9 + 3 * n + g]
    end
  end
  return load_fragments()
end

local function publish_to(k, a)
  local done = redis.call('GET', KEYS[k])
  if done then
    local space = string.find(done, ' ', 1, true)
    return {1, string.sub(done, 1, space - 1), string.sub(done, space + 1)}
  end
  local n = tonumber(ARGV[a + 1])
  local p = {seq = KEYS[k + 1], messages = KEYS[k + 2], refs = KEYS[k + 3], parked = KEYS[k + 5],
    history = KEYS[k + 6], batches = KEYS[k + 7], window = KEYS[k + 8], debounce = KEYS[k + 9],
    k = k, ngroups = n, due = {}, channel = {}, now = now_us(), scheduled = {}, later = {},
    hashed = {}, counted = {}}
  local refused = publish_ttl(p, ARGV[a]) or stale(KEYS[k + 4], a + 2, n)
  if refused then return refused end
  for g = 1, n do p.due[g], p.channel[g] = KEYS[k + 9 + g], ARGV[a + 1 + n + g] end
  p.first = a + 2 + 2 * n
  p.count = (#ARGV - p.first + 1) / 3
  -- A score of now goes as the one string now_s: Redis converts each number argument of a
  -- command to text anew (about 0.3 µs of a batch's time per message).
  p.now_s = int(p.now)
  publish_window(p)
  local last_id = next_ids(p.seq, p.count)
  local first_id = string.format('%012x', last_id - p.count + 1)
  -- outcomes holds the letters of the keyed messages, once there is one: every other is 's'.
  local outcomes = nil
  for i = 0, p.count - 1 do
    local at = p.first + 3 * i
    local data, spec = ARGV[at], ARGV[at + 2]
    local id = string.format('%012x', last_id - p.count + 1 + i)
    local score = publish_score(p.now, ARGV[at + 1])
    if spec == '' then
      publish_plain(p, id, data, score)
    elseif string.sub(spec, 1, 1) == 'B' then
      publish_lazy(p).batch_item(p, spec, data, id)
    else
      outcomes = outcomes or {}
      outcomes[i + 1] = publish_lazy(p).publish_keyed(p, spec, id, data, score)
    end
  end
  publish_flush(p)
  if #p.later > 0 then publish_lazy(p).publish_far(p) end
  local reply = string.rep('s', p.count)
  if outcomes then
    for i = 1, p.count do outcomes[i] = outcomes[i] or 's' end
    reply = table.concat(outcomes)
  end
  redis.call('SET', KEYS[k], first_id .. ' ' .. reply, 'PX', p.ttl)
  return {1, first_id, reply}
end
