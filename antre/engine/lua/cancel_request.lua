-- cancel_request: an operator asks for a running job to be stopped.
-- KEYS[1] job   KEYS[2] cancels (HASH job id -> JSON request)
-- ARGV[1] id   ARGV[2] JSON {by, to ('dlq' | 'discard'), reason, at}
-- Returns: 'OK'; else the job's state ('done', 'dead', 'ready', ..., or 'gone') and nothing
-- changed. The request is kept on the job too (field 'cancel'), so a worker that reserves it
-- again after a lease expiry sees it with the job, and in KEYS[2] for the workers' heartbeat.
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return 'gone' end
if state ~= 'inflight' then return state end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[1], 'cancel', ARGV[2])
return 'OK'
