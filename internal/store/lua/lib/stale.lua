-- fragment stale; needs: nothing
-- stale checks the caller's view of a topic's consumer groups: the n names at ARGV[first..]
-- must be exactly the members of the groups set. A view that names a removed group is stale
-- too, so that no write brings a removed group back. Returns nil when the view is right, else
-- the reply {0, group...} that gives the caller the current groups; nothing is written either way.
local function stale(groups, first, n)
  -- One SMEMBERS rather than SCARD and SMISMEMBER: the caller names every group anyway.
  local current = redis.call('SMEMBERS', groups)
  local wrong = #current ~= n
  if not wrong and n == 1 then
    wrong = current[1] ~= ARGV[first]
  elseif not wrong and n > 0 then
    local registered = {}
    for _, g in ipairs(current) do registered[g] = true end
    for i = first, first + n - 1 do
      if not registered[ARGV[i]] then wrong = true end
    end
  end
  if not wrong then return nil end
  table.insert(current, 1, 0)
  return current
end
