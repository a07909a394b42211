-- retry: in-flight -> scheduled at visible_at (or ready when visible_at <= now).
-- Used for retryable errors (spend attempt), rate limits / busy locks / held breakers (no
-- attempt), and graceful hand-back on shutdown (no attempt, delivery not counted).
-- KEYS[1] job   KEYS[2] inflight   KEYS[3] scheduled   KEYS[4] ready   KEYS[5] stats
-- ARGV[1] id   ARGV[2] epoch   ARGV[3] now_ms   ARGV[4] visible_at_ms   ARGV[5] spend attempt 1|0
-- ARGV[6] undo the delivery count 1|0   ARGV[7] error ('' records no error)   ARGV[8] error kind
-- ARGV[9] traceback   ARGV[10] stats counter to bump
-- KEYS[6] the job's timeline (optional)   ARGV[11] the caller's event details as JSON ('')
-- ARGV[12] actor ('' = the job's worker). The event is 'handed_back' (counter handed_back),
-- 'failed' (an error is recorded) or 'snoozed' (why: the error kind).
-- ARGV[13] count a snooze on the job ('snoozes', capped by the worker) 1|0 (absent: 0)
-- ARGV[14] '0': the job gives up its key's turn (a handler with ordered=False): the next job
-- waiting on its lock_key becomes the head, and this one waits at the end of the line (its
-- visible_at kept for when its turn comes). Absent or '1': a head keeps its turn (issue 23).
-- KEYS[7] dead   KEYS[8] errgroups   KEYS[9] cancels   ARGV[15] dead-by-type prefix
-- ARGV[16] dead-by-group prefix (issue 25; with KEYS[6]): a job an operator cancelled is not put
-- back: it ends as cancelled instead (to the DLQ or discarded, as requested; cancel_end).
-- A retried job replayed by a paced bulk replay (field 'rtask') counts its first failure for
-- the task (redrive_failed in _lib.lua).
-- Returns: 'OK', 'CANCELLED' (ended as cancelled), or 'LOST:<why>' with nothing changed.
local id, epoch, now, visible_at = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local lost = lease_error(KEYS[1], epoch)
if lost then return lost end
redis.call('ZREM', KEYS[2], id)
gate_leave(prefix_of(KEYS[1], id), id, now, nil)  -- its limit slots pass on (issue 23)
if KEYS[9] then
  local req = cancel_of(redis.call('HGET', KEYS[1], 'cancel'))
  if req then
    cancel_end(KEYS[1], id, now, req, actor_of(KEYS[1], ARGV[12]),
               {KEYS[7], KEYS[5], KEYS[8], ARGV[15], ARGV[16]}, KEYS[9], KEYS[6], nil, nil)
    return 'CANCELLED'
  end
end
if ARGV[5] == '1' then bump(KEYS[1], 'attempt', 1) end
if ARGV[6] == '1' then bump(KEYS[1], 'deliveries', -1) end
if ARGV[13] == '1' then bump(KEYS[1], 'snoozes', 1) end
if ARGV[7] ~= '' then
  append_error(KEYS[1], now, ARGV[8], ARGV[7], ARGV[9])
  -- a replayed job's first failure since its replay counts for its redrive (redrive_failed)
  if ARGV[5] == '1' and num_field(KEYS[1], 'attempt', 0) == 1 then
    local task = redis.call('HGET', KEYS[1], 'rtask')
    if task and task ~= '' then redrive_failed(KEYS[1], id, task, false, nil, nil, 1) end
  end
end
if KEYS[6] then
  local actor = actor_of(KEYS[1], ARGV[12])
  if ARGV[10] == 'handed_back' then
    tl_add(KEYS[6], now, 'handed_back', actor, {}, ARGV[11])
  elseif ARGV[7] ~= '' then
    tl_add(KEYS[6], now, 'failed', actor,
           {error = ARGV[7], kind = ARGV[8], traceback = string.sub(ARGV[9], -2000),
            attempt = num_field(KEYS[1], 'attempt', 0), attempt_spent = ARGV[5] == '1',
            next_at = visible_at}, ARGV[11])
  else
    tl_add(KEYS[6], now, 'snoozed', actor, {why = ARGV[8], counter = ARGV[10],
                                            until_ms = visible_at}, ARGV[11])
  end
end
redis.call('HSET', KEYS[1], 'visible_at', visible_at, 'deadline', 0)
local waits = false
if ARGV[14] == '0' then  -- unordered: the turn goes to the next in line, this job joins its end
  local lk, prefix = redis.call('HGET', KEYS[1], 'lock_key') or '', prefix_of(KEYS[1], id)
  if lk ~= '' and redis.call('HGET', tag_of(prefix) .. 'kturn', lk) == id then
    turn_pass(prefix, id, lk, now)
    waits = not turn_join(prefix, id, lk, now)
    -- waiting on its key again: its group's slot goes to the group's next job
    if waits then group_leave(prefix, id, redis.call('HGET', KEYS[1], 'fgroup'), now) end
  end
end
if waits then
  -- (state and line written by turn_join)
elseif visible_at <= now then
  redis.call('HSET', KEYS[1], 'state', 'ready')
  redis.call('RPUSH', KEYS[4], id)
else
  redis.call('HSET', KEYS[1], 'state', 'scheduled')
  redis.call('ZADD', KEYS[3], visible_at, id)
end
redis.call('HINCRBY', KEYS[5], ARGV[10], 1)
return 'OK'
