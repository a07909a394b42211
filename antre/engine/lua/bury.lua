-- bury: in-flight -> dead-letter queue, with the reason and the error kept on the job.
-- KEYS[1] job   KEYS[2] inflight   KEYS[3] dead (ZSET by time)   KEYS[4] stats   KEYS[5] errgroups
-- ARGV[1] id   ARGV[2] epoch   ARGV[3] now_ms   ARGV[4] reason   ARGV[5] error   ARGV[6] kind
-- ARGV[7] traceback   ARGV[8] error signature (normalised)   ARGV[9] dead-by-type prefix
-- ARGV[10] dead-by-group prefix   ARGV[11] spend attempt 1|0
-- KEYS[6] the job's timeline (optional)   ARGV[12] the caller's event details as JSON ('')
-- ARGV[13] actor ('' = the job's worker)
-- Returns: 'OK:<group>', or 'LOST:<why>' with nothing changed.
local id, epoch, now = ARGV[1], ARGV[2], tonumber(ARGV[3])
local lost = lease_error(KEYS[1], epoch)
if lost then return lost end
redis.call('ZREM', KEYS[2], id)
if ARGV[11] == '1' then bump(KEYS[1], 'attempt', 1) end
append_error(KEYS[1], now, ARGV[6], ARGV[5], ARGV[7])
redis.call('HSET', KEYS[1], 'deadline', 0)
if KEYS[6] then
  tl_add(KEYS[6], now, 'buried', actor_of(KEYS[1], ARGV[13]),
         {reason = ARGV[4], error = ARGV[5], kind = ARGV[6],
          traceback = string.sub(ARGV[7], -2000)}, ARGV[12])
end
local group = bury_job(KEYS[1], id, now, ARGV[4], ARGV[8], KEYS[3], KEYS[4], KEYS[5], ARGV[9], ARGV[10])
return 'OK:' .. group
