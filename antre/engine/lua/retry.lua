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
-- visible_at kept for when its turn comes). Absent or '1': a head keeps its turn.
-- KEYS[7] dead   KEYS[8] errgroups   KEYS[9] cancels   ARGV[15] dead-by-type prefix
-- ARGV[16] dead-by-group prefix (with KEYS[6]): a job an operator cancelled is not put
-- back: it ends as cancelled instead (to the DLQ or discarded, as requested; cancel_end).
-- A retried job replayed by a paced bulk replay (field 'rtask') counts its first failure for
-- the task (redrive_failed in _burial.lua).
-- A worker's batch of failures goes through fail_many.lua (the same per job: retry_job).
-- Returns: 'OK', 'CANCELLED' (ended as cancelled), or 'LOST:<why>' with nothing changed.
return retry_job({KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]},
                 ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]),
                 {ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11], ARGV[12],
                  ARGV[13], ARGV[14], ARGV[15], ARGV[16]})
