-- checkpoint: store a running job's progress, only for the holder of the current lease.
-- A retried or re-delivered job starts with it as ctx.last_checkpoint.
-- KEYS[1] job   ARGV[1] epoch   ARGV[2] checkpoint JSON
-- Returns: 'OK', or 'LOST:<why>' with nothing changed.
local lost = lease_error(KEYS[1], ARGV[1])
if lost then return lost end
redis.call('HSET', KEYS[1], 'checkpoint', ARGV[2])
return 'OK'
