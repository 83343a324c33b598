-- fragment stale; needs: nothing
-- stale checks the caller's view of a topic's consumer groups: the n names at ARGV[first..]
-- must be exactly the members of the groups set. A view that names a removed group is stale
-- too, so that no write brings a removed group back. Returns nil when the view is right, else
-- the reply {0, group...} that gives the caller the current groups; nothing is written either way.
local function stale(groups, first, n)
  local wrong = redis.call('SCARD', groups) ~= n
  if not wrong and n > 0 then
    for _, present in ipairs(redis.call('SMISMEMBER', groups, unpack(ARGV, first, first + n - 1))) do
      if present == 0 then wrong = true end
    end
  end
  if not wrong then return nil end
  local current = redis.call('SMEMBERS', groups)
  table.insert(current, 1, 0)
  return current
end
