-- fragment publish_debounce; needs: int
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

-- debounce_cap records cap (Unix µs) as the debounce cap of the message with key and hex ID,
-- kept max_wait µs past the cap, and returns it.
local function debounce_cap(p, key, hex, cap, max_wait)
  redis.call('SET', p.debounce .. key, hex .. ' ' .. int(cap), 'PXAT',
    int(math.floor((cap + max_wait) / 1000) + 1))
  return cap
end

-- debounce_score returns the due time score (Unix µs) of a keep-later duplicate of the message
-- with key and hex ID, pulled back to that message's cap; max_wait (µs) is the duplicate's own,
-- nil for none, which sets the cap when there is none yet.
local function debounce_score(p, key, hex, score, max_wait)
  local rec = redis.call('GET', p.debounce .. key)
  local cap = rec and string.sub(rec, 1, 12) == hex and tonumber(string.sub(rec, 14))
  if not cap and max_wait then cap = debounce_cap(p, key, hex, p.now + max_wait, max_wait) end
  if cap then return math.min(score, cap) end
  return score
end
