-- fragment publish_score; needs: nothing
-- MAX_EMBEDDED is the most bytes of message a due member holds: with one group, a message is
-- stored in its due member itself, saving a hash entry, unless it is larger (a larger member
-- would make every ZRANGE of the set's head copy it).
local MAX_EMBEDDED = 1024

-- AT is the byte of '@', which starts an absolute due time.
local AT = 64

-- publish_score returns the due time (Unix µs) of a message with schedule `when` (see publish_to)
-- published at now. A plain delay, the common schedule, costs one tonumber: each string
-- function called costs Redis about 800 instructions, and tonumber refuses the other forms.
local function publish_score(now, when)
  local delay = tonumber(when)
  if delay then
    if delay > 0 then return now + delay end
    return now
  end
  if string.byte(when) == AT then return math.max(tonumber(string.sub(when, 2)), now) end
  local cap = string.find(when, '<', 1, true)
  local latest = tonumber(string.sub(when, cap + 1))
  return math.max(math.min(now + math.max(tonumber(string.sub(when, 1, cap - 1)), 0), latest), now)
end
