-- Cancelled jobs.
-- Part of the scripts' shared library (_lib.lua lists the parts in order).

-- == Cancelled jobs ==================================================================
-- An operator's cancel request (cancel_request.lua) is kept on the job (field 'cancel', JSON
-- {by, to, reason, at}) until the job ends. A cancelled job is never run again nor handed back:
-- whichever script would put it back where a worker can take it (a hand-back, retry or snooze:
-- retry.lua; a lease expiry: sweep_expired.lua; a reserve of one put back before: reserve.lua)
-- ends it as cancelled instead (cancel_end), as cancel_finish.lua does for the worker.
local CANCEL_TL_KEEP_MS = 7 * 86400000  -- a discarded job's timeline stays (DISCARDED_TIMELINE_MS)

local function cancel_of(raw)
  -- the request held in a job's 'cancel' field (a table), or nil when there is none
  if type(raw) ~= 'string' or raw == '' then return nil end
  local ok, req = pcall(cjson.decode, raw)
  if not ok or type(req) ~= 'table' then req = {} end
  return req
end

local function cancel_end(job_key, id, now, req, actor, dlq, cancels, tl, reason, signature)
  -- ends the job at ``job_key`` (already taken out of inflight / ready) as the request ``req``
  -- asks: to the DLQ (dlq = {dead, stats, errgroups, dead-by-type prefix, dead-by-group
  -- prefix}) with ``reason`` ('cancelled by NAME: why' when nil), or discarded (the job gone,
  -- its timeline kept CANCEL_TL_KEEP_MS). A 'cancelled' event ends its timeline ``tl``.
  local by, why = tostring(req.by or '?'), tostring(req.reason or '')
  local to = req.to == 'discard' and 'discard' or 'dlq'
  reason = reason or ('cancelled by ' .. by .. (why ~= '' and (': ' .. why) or ''))
  signature = signature or ('cancelled: cancelled by ' .. by)
  tl_pending(job_key, tl, nil)  -- the last delivery's 'reserved' event first
  redis.call('HDEL', cancels, id)
  redis.call('HINCRBY', dlq[2], 'cancelled', 1)
  local detail = {by = by, reason = why, to = to, requested_at = tonumber(req.at) or 0,
                  delivery = num_field(job_key, 'deliveries', 0)}
  if to == 'discard' then
    tl_add(tl, now, 'cancelled', actor, detail)
    turn_end(job_key, id, now)  -- the next job waiting on its lock_key gets the turn
    flow_gone(job_key, id, now, reason, dlq[2])  -- (a member of a flow: gone for good)
    local df = redis.call('HMGET', job_key, 'idem_key', 'waiters')
    if df[1] then unindex_key(idem_index_key(prefix_of(job_key, id)), df[1], id) end
    result_wake(prefix_of(job_key, id), id, df[2])
    redis.call('DEL', job_key)
    redis.pcall('PEXPIRE', tl, CANCEL_TL_KEEP_MS)
    redis.call('HINCRBY', dlq[2], 'discarded', 1)
    return 'discarded'
  end
  redis.call('HDEL', job_key, 'cancel', 'rtask')  -- (an operator's cancel: no redrive failure)
  append_error(job_key, now, 'cancelled', reason, '')
  redis.call('HSET', job_key, 'deadline', 0)
  bury_job(job_key, id, now, reason, signature, dlq[1], dlq[2], dlq[3], dlq[4], dlq[5])
  detail.reason_text = reason
  tl_add(tl, now, 'cancelled', actor, detail)
  return 'cancelled'
end
