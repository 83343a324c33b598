-- worker_gone.lua: deletes the record of one worker that stops (a closed Subscriber or
-- Scheduler). The keys of the others keep their expiry; once the last record is deleted, Redis
-- deletes the emptied keys.
--
-- fragments: none
-- KEYS[1]  expiry  zset  worker member -> when its record expires (see worker_beat.lua)
-- KEYS[2]  index   zset  worker member, scored 0
-- KEYS[3]  info    hash  worker member -> its record
-- ARGV[1]  the worker's member
--
-- Returns 1 when it deleted a record, 0 when there was none.

redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return redis.call('ZREM', KEYS[1], ARGV[1])
