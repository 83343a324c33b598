-- forgetkey.lua: frees a message key at once: deletes the history of the key (see ended in lib)
-- when no message with the key is stored any more, so that a message with the key can be
-- published again before the history's retention ends. The Scheduler calls it after cancelling
-- a tick's message it had stored ahead, so that the tick can be armed again.
--
-- fragments: none
-- KEYS[1]              messages  hash    field (see scripts.go) -> marshaled message
-- KEYS[2]              history   hash    the key's history
-- ARGV[1]              the key
--
-- Returns 1 when it deleted the history, 0 when a message with the key is still stored (nothing
-- changed) or there was no history.

if redis.call('HEXISTS', KEYS[1], '=' .. ARGV[1]) == 1 then return 0 end
return redis.call('DEL', KEYS[2])
