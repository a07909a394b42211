-- progress: a running job's progress (ctx.progress), only for the holder of the current lease.
-- KEYS[1] job   ARGV[1] epoch   ARGV[2] progress JSON {"f": fraction 0..1, "m": message,
-- "t": ms} (checked and bounded by the caller: Queue.progress)
-- No timeline event: a handler may report often (the worker sends at most a few a second);
-- the job page shows the last value, and it stays on the job after its end.
-- Returns: 'OK', or 'LOST:<why>' with nothing changed.
local lost = lease_error(KEYS[1], ARGV[1])
if lost then return lost end
redis.call('HSET', KEYS[1], 'progress', ARGV[2])
return 'OK'
