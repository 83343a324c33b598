-- fragment publish_call; needs: int, now_us, next_ids, stale, publish_score, publish_window, publish_plain, publish_flush; loads: publish_keyed, publish_batch, publish_far
-- publish_call is publish_to for every call that is not plain (see publish_to): it takes the
-- same keys and arguments and returns the same. With now (Unix µs on the Redis clock), publish_to
-- has read the clock, checked the caller's view of the groups and seen the window or the parked
-- set; publish_call does not again. It is a dispatcher: it reads the call, then hands each message to the fragment of its
-- kind, and writes what they gathered at the end:
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

-- publish_later hands the messages for the compact tier of publish_to's plain call p to
-- publish_far, which it loads a level deeper than publish_call (see publish_to).
local function publish_later(p)
  return load_fragments().publish_far(p)
end

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

local function publish_call(k, a, now, text)
  local done = redis.call('GET', KEYS[k])
  if done then
    local space = string.find(done, ' ', 1, true)
    if text then return string.sub(done, space + 1) end
    return {1, string.sub(done, 1, space - 1), string.sub(done, space + 1)}
  end
  local n = tonumber(ARGV[a + 1])
  local p = {seq = KEYS[k + 1], messages = KEYS[k + 2], refs = KEYS[k + 3], parked = KEYS[k + 5],
    history = KEYS[k + 6], batches = KEYS[k + 7], window = KEYS[k + 8], debounce = KEYS[k + 9],
    k = k, ngroups = n, due = {}, channel = {}, now = now or now_us(), scheduled = {}, later = {},
    hashed = {}, counted = {}, seen = now ~= nil}
  local refused = publish_ttl(p, ARGV[a]) or (not now and stale(KEYS[k + 4], a + 2, n))
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
  if text then return reply end
  return {1, first_id, reply}
end
