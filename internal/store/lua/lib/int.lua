-- fragment int; needs: nothing
-- int is the integer n (a number, or a decimal string) as decimal text. Every number a script
-- turns into text goes through int: Lua's own (`..`, tostring) keeps 14 significant digits,
-- which rounds a Unix time in µs to 100 µs (scripts_text_test.go checks every script).
local function int(n)
  return string.format('%d', n)
end
