-- worker_beat.lua: records the heartbeat of one worker (a Subscriber or a Scheduler) until
-- ARGV[2] ms after the Redis clock's now, drops at most 100 records that expired, and sets the
-- three keys to expire with the latest record, so that they vanish by themselves once every
-- worker is gone. One call per worker per refresh: bounded whatever the number of workers.
--
-- fragments: int, now_us
-- KEYS[1]  expiry  zset  worker member -> when its record expires (Unix ms, Redis clock)
-- KEYS[2]  index   zset  worker member, scored 0, read in member order (BYLEX)
-- KEYS[3]  info    hash  worker member -> "expiry lastbeat record" (Unix ms, then JSON)
-- ARGV[1]  the worker's member: its kind, a space and its ID
-- ARGV[2]  how long the record lasts, ms (> 0)
-- ARGV[3]  the record, JSON
--
-- Returns {now, expiry}, Unix ms on the Redis clock.

local ttl = tonumber(ARGV[2])
if ARGV[1] == '' or not ttl or ttl < 1 then
  return redis.error_reply('ERR worker_beat: bad worker name or record lifetime')
end
local now = math.floor(now_us() / 1000)
local expires = now + math.floor(ttl)
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 100)
if #expired > 0 then
  redis.call('ZREM', KEYS[1], unpack(expired))
  redis.call('ZREM', KEYS[2], unpack(expired))
  redis.call('HDEL', KEYS[3], unpack(expired))
end
redis.call('ZADD', KEYS[1], expires, ARGV[1])
redis.call('ZADD', KEYS[2], 0, ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], int(expires) .. ' ' .. int(now) .. ' ' .. ARGV[3])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
for i = 1, 3 do
  redis.call('PEXPIREAT', KEYS[i], last[2])
end
return {now, expires}
