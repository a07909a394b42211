-- result_wait: a producer starts waiting for a job's end (antre/observe/waiting.py).
-- KEYS[1] job (HASH)   KEYS[2] the job's result wake list (keys.QueueKeys.result_wake)
-- A job not yet ended (any state but done and dead) counts one more waiter in its field
-- 'waiters': the script that ends it pushes one token per waiter to KEYS[2] (result_wake in
-- _lib.lua) and clears the count, so the caller's BLPOP on KEYS[2] returns when the job ends.
-- A done or dead job, a job that does not exist and a record that is not a hash count nothing.
-- Returns: the job's state ('' when there is no job hash).
local f = redis.pcall('HMGET', KEYS[1], 'state')
if f.err or not f[1] then return '' end
if f[1] ~= S.done and f[1] ~= S.dead then redis.call('HINCRBY', KEYS[1], 'waiters', 1) end
return f[1]
