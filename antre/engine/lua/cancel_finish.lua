-- cancel_finish: a cancelled in-flight job -> the dead-letter queue, or gone.
-- KEYS[1] job   KEYS[2] inflight   KEYS[3] dead   KEYS[4] stats   KEYS[5] errgroups
-- KEYS[6] cancels (HASH)
-- ARGV[1] id   ARGV[2] epoch   ARGV[3] now_ms   ARGV[4] 'dlq' | 'discard'
-- ARGV[5] reason ('cancelled by NAME: why')   ARGV[6] error signature
-- ARGV[7] dead-by-type prefix   ARGV[8] dead-by-group prefix   ARGV[9] job_prefix
-- Returns: 'OK', or 'LOST:<why>' with nothing changed. No attempt is spent.
local id, epoch, now = ARGV[1], ARGV[2], tonumber(ARGV[3])
local lost = lease_error(KEYS[1], epoch)
if lost then return lost end
redis.call('ZREM', KEYS[2], id)
redis.call('HDEL', KEYS[6], id)
redis.call('HINCRBY', KEYS[4], 'cancelled', 1)
if ARGV[4] == 'discard' then
  turn_end(KEYS[1], id, now)  -- the next job waiting on its lock_key gets the turn
  forget_job(ARGV[9], id)  -- the hash, its timeline, its idempotency-index entry
  redis.call('HINCRBY', KEYS[4], 'discarded', 1)
  return 'OK'
end
redis.call('HDEL', KEYS[1], 'cancel')
append_error(KEYS[1], now, 'cancelled', ARGV[5], '')
redis.call('HSET', KEYS[1], 'deadline', 0)
bury_job(KEYS[1], id, now, ARGV[5], ARGV[6], KEYS[3], KEYS[4], KEYS[5], ARGV[7], ARGV[8])
return 'OK'
