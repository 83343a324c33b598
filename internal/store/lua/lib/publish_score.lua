-- fragment publish_score; needs: nothing
-- MAX_EMBEDDED is the most bytes of message a due member holds: with one group, a message is
-- stored in its due member itself, saving a hash entry, unless it is larger (a larger member
-- would make every ZRANGE of the set's head copy it).
local MAX_EMBEDDED = 1024

-- publish_score returns the due time (Unix µs) of a message with schedule `when` (see publish_to)
-- published at now. The forms in the order of how common they are: a delay with its latest due
-- time (delay.For sets both of Watermill's keys, see DelayOf), a plain delay, a due time. Each
-- call of a string function or tonumber costs Redis about 800 instructions (tonumber converts
-- twice): a form is told by one string.find and one tonumber, a number cut out of the text is
-- converted by arithmetic (once, and no call), and the bounds are compared in Lua, not with
-- math.max.
local function publish_score(now, when)
  local cap = string.find(when, '<', 1, true)
  if cap then
    local score = now + string.sub(when, 1, cap - 1)
    local latest = string.sub(when, cap + 1) + 0
    if score > latest then score = latest end
    if score < now then return now end
    return score
  end
  local delay = tonumber(when)
  if delay then
    if delay > 0 then return now + delay end
    return now
  end
  local at = string.sub(when, 2) + 0 -- '@' and a Unix time in µs
  if at > now then return at end
  return now
end
