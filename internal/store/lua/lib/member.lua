-- fragment member; needs: int
-- member names a message after `attempts` attempts. A keyed ID always carries the count, so that
-- a script that knows the key and the count can name the member exactly.
local function member(id, attempts)
  if attempts == 0 and #id == 12 then return id end
  return id .. ':' .. int(attempts)
end
