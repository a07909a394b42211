-- cancel_finish: a cancelled in-flight job -> the dead-letter queue, or gone (its worker carried
-- out the request: the handler stopped, or was abandoned after its grace).
-- KEYS[1] job   KEYS[2] inflight   KEYS[3] dead   KEYS[4] stats   KEYS[5] errgroups
-- KEYS[6] cancels (HASH)   KEYS[7] the job's timeline (gets the 'cancelled' event)
-- ARGV[1] id   ARGV[2] epoch   ARGV[3] now_ms   ARGV[4] 'dlq' | 'discard' (when the job holds
-- no request any more; else its own request's)   ARGV[5] reason ('cancelled by NAME: why')
-- ARGV[6] (unused: the signature is 'cancelled: cancelled by NAME', as in cancel_end)
-- ARGV[7] dead-by-type prefix   ARGV[8] dead-by-group prefix   ARGV[9] job_prefix
-- Returns: 'OK', or 'LOST:<why>' with nothing changed. No attempt is spent.
local id, epoch, now = ARGV[1], ARGV[2], tonumber(ARGV[3])
local lost = lease_error(KEYS[1], epoch)
if lost then return lost end
redis.call('ZREM', KEYS[2], id)
local req = cancel_of(redis.call('HGET', KEYS[1], 'cancel'))
if not req then
  local by = string.match(ARGV[5], '^cancelled by ([^:]*)') or '?'
  req = {by = by, to = ARGV[4]}
end
cancel_end(KEYS[1], id, now, req, actor_of(KEYS[1], ''), {KEYS[3], KEYS[4], KEYS[5], ARGV[7], ARGV[8]}, KEYS[6],
           KEYS[7], ARGV[5], nil)
return 'OK'
