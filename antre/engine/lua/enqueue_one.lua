-- enqueue_one: a single new job made ready now, the common case of app.enqueue, in the least
-- server time (the single enqueue). Same outcome as enqueue.lua for such a job
-- (tests/test_core_lua.py compares the two): the type and queue indexes (see KEYS[5],
-- KEYS[6]), the idempotency-key index, one HSET of the standard fields and the state, the
-- ready list, the 'enqueued' counter and one wake token. The client sends here only a job
-- whose id it has just made (128 random bits), with the standard fields, visible now,
-- neither unique nor a periodic tick, and without a lock_key (such a job may have to wait
-- behind its key's head: enqueue.lua; one sent here is refused with an error, unchanged);
-- every other job goes to enqueue.lua. Such an id exists
-- already only when this very call is sent again (the client's retry after a connection lost
-- before the reply): then nothing is changed and 0 is returned, so the job is not made ready
-- twice (a second copy of its id in the ready list would be reserved again while in flight).
-- KEYS[1] ready (LIST)   KEYS[2] stats (HASH)   KEYS[3] wake (LIST)
-- KEYS[4] idempotency-key index (HASH, keys.QueueKeys.idem_index)
-- KEYS[5], KEYS[6] (optional) the queue's types (SET) and the queues index (SET): the job's type
-- and queue are added to them. Both only grow; a producer sends them for the first job of a
-- type and then once a second (queue.INDEX_EVERY_MS), and on a cluster, where the queues index is
-- in another slot, sends that SADD on its own
-- ARGV[1] job_prefix   ARGV[2 .. 15] the job's envelope.NEW_FIELDS values, in that order
-- (one argument each: no JSON to decode). Returns 1, or 0 for an id that exists (unchanged).
local v = ARGV
local id = v[2]
if v[11] ~= '' then return redis.error_reply('ERR enqueue_one: a job with a lock_key goes to enqueue.lua') end
if redis.call('EXISTS', v[1] .. id) == 1 then return 0 end
-- the indexes first, the job's record last: a key of another type fails the call before the
-- job is written (no record in no index)
if KEYS[5] then redis.call('SADD', KEYS[5], v[3]) end
if KEYS[6] then redis.call('SADD', KEYS[6], v[5]) end
redis.call('HSET', KEYS[4], v[6], id)
redis.call('HINCRBY', KEYS[2], 'enqueued', 1)
-- a token for an idle worker blocked on the wake list; the list is capped at 64 as wake() does
if redis.call('LPUSH', KEYS[3], '1') > 64 then redis.call('LTRIM', KEYS[3], 0, 63) end
redis.call('LPUSH', KEYS[1], id)
-- the job last: every write before it can fail on a key of another type, none after it
if v[10] == '' and at_defaults(v[12], v[13], v[14], v[15]) then
  -- the defaults, the lock key (always empty here), a trace made from the id and visible_at
  -- (its created_at: a job sent here is visible at once): not stored, as enqueue.lua
  redis.call('HSET', v[1] .. id, 'type', v[3], 'idem_key', v[6], 'payload', v[7],
             'max_attempts', v[8], 'created_at', v[9], 'state', S.ready)
elseif at_defaults(v[12], v[13], v[14], v[15]) then
  redis.call('HSET', v[1] .. id, 'type', v[3], 'visible_at', v[4],
             'idem_key', v[6], 'payload', v[7], 'max_attempts', v[8], 'created_at', v[9],
             'trace_id', v[10], 'state', S.ready)
else
  redis.call('HSET', v[1] .. id, 'type', v[3], 'visible_at', v[4],
             'idem_key', v[6], 'payload', v[7], 'max_attempts', v[8], 'created_at', v[9],
             'trace_id', v[10], 'lock_key', v[11], 'headers', v[12], 'timeout_s', v[13],
             'vt_ms', v[14], 'max_deliveries', v[15], 'state', S.ready)
end
return 1
