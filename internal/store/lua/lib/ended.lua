-- fragment ended; needs: int, split, each_chunk, exists_count
-- When a consumer group is done with a keyed message, the group's entry in its
-- keyed hash (key -> the member it holds) goes, and, when the key keeps a history (a retention
-- was set at publish), the group's record in it becomes "outcome time attempt[ reason]": the
-- outcome (acked, dead-lettered or cancelled), the Redis time in µs, the attempt count and,
-- for a dead letter, the reason. group is {keyed = the group's keyed hash, history = prefix of
-- the history keys, name = the group's name}.

-- histories_kept returns which of the given keys (no key twice) keep a history: a table key ->
-- true. One EXISTS answers for all of them when none or all of their history keys exist, the
-- common cases; else each is looked at. history is the prefix of the history keys.
local function histories_kept(history, keys)
  local kept, histories = {}, {}
  for i, key in ipairs(keys) do histories[i] = history .. key end
  local n = exists_count(histories)
  if n == 0 then return kept end
  for i, key in ipairs(keys) do
    if n == #keys or redis.call('EXISTS', histories[i]) == 1 then kept[key] = true end
  end
  return kept
end

-- ended_all notes that a consumer group is done with the keyed messages of the given keys
-- (see ended; attempts: their attempt counts, in the same order) with one HDEL of the group's
-- keyed hash and one EXISTS of their history keys for all of them. Returns the keys whose
-- history exists (key -> true), which drop takes so as not to look again.
local function ended_all(group, keys, attempts, outcome, reason, now)
  if #keys == 0 then return {} end
  each_chunk('HDEL', group.keyed, keys)
  local unique, seen = {}, {}
  for _, key in ipairs(keys) do
    if not seen[key] then seen[key], unique[#unique + 1] = true, key end
  end
  local kept = histories_kept(group.history, unique)
  for i, key in ipairs(keys) do
    if kept[key] then
      local record = outcome .. ' ' .. int(now) .. ' ' .. int(attempts[i])
      if reason and reason ~= '' then record = record .. ' ' .. reason end
      redis.call('HSET', group.history .. key, group.name, record)
    end
  end
  return kept
end

-- ended is ended_all for the one message with ID id, if keyed, at the given attempt.
local function ended(group, id, attempt, outcome, reason, now)
  local key = key_of(id)
  if key then ended_all(group, {key}, {attempt}, outcome, reason, now) end
end
