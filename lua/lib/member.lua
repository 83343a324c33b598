-- fragment member; needs: nothing
-- member names a message after `attempts` attempts.
local function member(id, attempts)
  if attempts == 0 then return id end
  return id .. ':' .. attempts
end
