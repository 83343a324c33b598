-- fragment hmget; needs: each_chunk
-- hmget returns the values of fields of a hash, false where a field is missing.
local function hmget(key, fields)
  local values = {}
  for _, reply in ipairs(each_chunk('HMGET', key, fields)) do
    for _, v in ipairs(reply) do values[#values + 1] = v end
  end
  return values
end
