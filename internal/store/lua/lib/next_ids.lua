-- fragment next_ids; needs: int, now_us
-- next_ids takes n IDs from a topic's ID counter seq and returns the last one's number. A
-- counter that does not exist, on a new topic or after Redis lost its data, starts from the
-- Redis clock in units of 16 µs: so IDs and epochs drawn after a data loss are greater than
-- every one drawn before it, as long as the counter did not draw more than one number per
-- 16 µs on average since it started (62,500 a second), and 12 hex digits hold it until 2112.
-- The counter's first number is kept beside it, in the key seq:birth (see born_after): a
-- registration whose epoch is older than its counter was lost with the data. The clock is read
-- only then: INCRBY returns n exactly when it created the counter.
local function next_ids(seq, n)
  local last = redis.call('INCRBY', seq, n)
  if last > n then return last end
  local first = math.floor(now_us() / 16) + 1
  last = first + n - 1
  redis.call('SET', seq, int(last))
  redis.call('SET', seq .. ':birth', int(first))
  return last
end
