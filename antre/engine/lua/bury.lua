-- bury: in-flight -> dead-letter queue, with the reason and the error kept on the job.
-- KEYS[1] job   KEYS[2] inflight   KEYS[3] dead (ZSET by time)   KEYS[4] stats   KEYS[5] errgroups
-- ARGV[1] id   ARGV[2] epoch   ARGV[3] now_ms   ARGV[4] reason   ARGV[5] error   ARGV[6] kind
-- ARGV[7] traceback   ARGV[8] error signature (normalised)   ARGV[9] dead-by-type prefix
-- ARGV[10] dead-by-group prefix   ARGV[11] spend attempt 1|0
-- KEYS[6] the job's timeline (optional)   ARGV[12] the caller's event details as JSON ('')
-- ARGV[13] actor ('' = the job's worker)
-- A worker's batch of failures goes through fail_many.lua (the same per job: bury_failed).
-- Returns: 'OK:<group>', or 'LOST:<why>' with nothing changed.
return bury_failed({KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]}, ARGV[1], ARGV[2],
                   tonumber(ARGV[3]), {ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9],
                                       ARGV[10], ARGV[11], ARGV[12], ARGV[13]})
