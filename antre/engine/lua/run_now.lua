-- run_now: a scheduled job -> ready at once (the operator's "run now").
-- KEYS[1] job   KEYS[2] scheduled   KEYS[3] ready
-- ARGV[1] id   ARGV[2] now_ms
-- KEYS[4] the job's timeline (optional)   ARGV[3] actor   ARGV[4] the caller's event details
-- as JSON ('')
-- Returns: 1 moved, 0 the job was not scheduled.
if redis.call('ZREM', KEYS[2], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'state', S.ready, 'visible_at', ARGV[2])
redis.call('RPUSH', KEYS[3], ARGV[1])
if KEYS[4] then tl_add(KEYS[4], tonumber(ARGV[2]), 'run_now', ARGV[3] or '', {}, ARGV[4]) end
return 1
