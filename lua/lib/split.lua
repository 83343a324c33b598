-- fragment split; needs: nothing
-- split returns the ID, the attempt count and the embedded message (or nil) of a member name.
local function split(name)
  local message = nil
  local bar = string.find(name, '|', 1, true)
  if bar ~= nil then
    message = string.sub(name, bar + 1)
    name = string.sub(name, 1, bar - 1)
  end
  local colon = string.find(name, ':', 1, true)
  if colon == nil then return name, 0, message end
  return string.sub(name, 1, colon - 1), tonumber(string.sub(name, colon + 1)), message
end
