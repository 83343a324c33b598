-- fragment publish_window; needs: nothing; loads: drop_parked
-- With G = 0, no group is registered yet: the messages wait in the parked set, in the
-- single-group form, until the first group registers and takes the set over (register.lua).
-- While the new-group window is open (the window key exists, see register.lua), the messages
-- also go to the parked set, so that a group that registers within the window receives them:
-- here they are never embedded, and the parked set counts as one holder in refs (publish_to's
-- short path parks a small message of a single-group topic embedded instead, a copy of its own
-- that nothing counts; see call_holders and register.lua). The window
-- never holds a message key: its copy of a keyed message (parked as ID:0) is a copy of the
-- message under the plain ID, its 12 hex digits (see window_id), counted in refs apart from
-- the key's field, so that the key is free once the registered groups are done with it; a
-- replace writes both (publish_keyed, publish_replace). A publish that would take the parked
-- set past the window's cap closes the window early. Once the window has closed, each publish
-- drops up to PARKED_DROP members of what it left (see drop_parked).

-- PARKED_DROP is how many members of a closed window's parked set each publish drops.
local PARKED_DROP = 100

-- publish_window sets whether the p.count messages of publish_to's call p go to the parked set
-- too (p.parking), and p.holders: how many sets hold each message, which refs counts while it
-- is more than one.
local function publish_window(p)
  p.parking, p.holders = p.ngroups == 0, p.ngroups
  if p.ngroups == 0 then return end
  -- Past a topic's first minute neither key exists: one lookup, not two (none when publish_to
  -- has seen one of them, p.seen).
  if not p.seen and redis.call('EXISTS', p.window, p.parked) == 0 then return end
  local cap = redis.call('HGET', p.window, '')
  if cap and redis.call('ZCARD', p.parked) + p.count > tonumber(cap) then
    redis.call('DEL', p.window)
  elseif cap then
    p.parking, p.holders = true, p.ngroups + 1
  end
  if not p.parking then load_fragments().drop_parked(p.parked, p.messages, p.refs, p.history, PARKED_DROP) end
end
