-- fragment split; needs: nothing
-- split returns the ID, the attempt count and the embedded message (or nil) of a member name
-- (see scripts.go). The attempt count is nil when the name is malformed. A keyed ID always
-- carries its attempt count, after the last ':', since the key may hold ':' itself.
local function split(name)
  -- The separator as a byte (nil past the end; '|' 124, ':' 58, '=' 61): string.byte makes no
  -- string, string.sub would look one up for every member a claim or an ack reads.
  local sep = string.byte(name, 13)
  if sep == nil then return name, 0, nil end
  if sep == 124 then return string.sub(name, 1, 12), 0, string.sub(name, 14) end
  if sep == 58 then return string.sub(name, 1, 12), tonumber(string.sub(name, 14)), nil end
  if sep == 61 then
    local id, n = string.match(name, '^(.*):(%d+)$')
    if id then return id, tonumber(n), nil end
  end
  return name, nil, nil
end

-- key_of returns the business key of a keyed ID, or nil.
local function key_of(id)
  -- A plain ID, 12 hex digits, is told by its length: # is no call, string.byte is one (about
  -- 800 Redis instructions, once per claimed or acked message).
  if #id > 12 and string.byte(id, 13) == 61 then return string.sub(id, 14) end
  return nil
end

-- field returns the messages hash field that holds the message of an ID: "=" and the key for a
-- keyed message, else the ID.
local function field(id)
  if #id > 12 and string.byte(id, 13) == 61 then return string.sub(id, 13) end
  return id
end

-- window_id returns the ID under which the new-group window keeps its copy of a message once a
-- group is registered (see register.lua): the 12 hex digits of a message key's ID, so that the
-- copy holds no key, else the ID itself (a plain message, or a batch, whose key is its own).
local function window_id(id)
  if string.sub(id, 13, 14) == '=' .. '\1' or string.sub(id, 13, 13) ~= '=' then return id end
  return string.sub(id, 1, 12)
end
