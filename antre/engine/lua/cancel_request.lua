-- cancel_request: an operator asks for a running job to be stopped.
-- KEYS[1] job   KEYS[2] cancels (HASH job id -> JSON request)
-- KEYS[3] the job's timeline (optional: gets a 'cancel_requested' event, actor: the operator)
-- ARGV[1] id   ARGV[2] JSON {by, to ('dlq' | 'discard'), reason, at}   ARGV[3] now_ms (with KEYS[3])
-- Returns: 'OK'; else the job's state ('done', 'dead', 'ready', ..., or 'gone') and nothing
-- changed. The request is kept on the job too (field 'cancel'), so a worker that reserves it
-- again after a lease expiry sees it with the job, and in KEYS[2] for the workers' heartbeat.
-- From now on no script puts the job back where a worker could run it again (see "Cancelled
-- jobs" in _lib.lua): a hand-back, retry, snooze or lease expiry ends it as cancelled.
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return 'gone' end
if state ~= S.inflight then return state end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[1], 'cancel', ARGV[2])
if KEYS[3] then
  local req = cancel_of(ARGV[2]) or {}
  local by = tostring(req.by or '?')
  tl_pending(KEYS[1], KEYS[3], nil)  -- the delivery's 'reserved' event first (_lib.lua)
  tl_add(KEYS[3], tonumber(ARGV[3]), 'cancel_requested', by,
         {by = by, reason = tostring(req.reason or ''), to = req.to == 'discard' and 'discard' or 'dlq',
          worker = redis.call('HGET', KEYS[1], 'worker_id') or ''})
end
return 'OK'
