-- retry: in-flight -> scheduled at visible_at (or ready when visible_at <= now).
-- Used for retryable errors (spend attempt), rate limits / busy locks / held breakers (no
-- attempt), and graceful hand-back on shutdown (no attempt, delivery not counted).
-- KEYS[1] job   KEYS[2] inflight   KEYS[3] scheduled   KEYS[4] ready   KEYS[5] stats
-- ARGV[1] id   ARGV[2] epoch   ARGV[3] now_ms   ARGV[4] visible_at_ms   ARGV[5] spend attempt 1|0
-- ARGV[6] undo the delivery count 1|0   ARGV[7] error ('' records no error)   ARGV[8] error kind
-- ARGV[9] traceback   ARGV[10] stats counter to bump
-- ARGV[11] count a snooze on the job ('snoozes', capped by the worker) 1|0 (absent: 0)
-- Returns: 'OK', or 'LOST:<why>' with nothing changed.
local id, epoch, now, visible_at = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local lost = lease_error(KEYS[1], epoch)
if lost then return lost end
redis.call('ZREM', KEYS[2], id)
if ARGV[5] == '1' then bump(KEYS[1], 'attempt', 1) end
if ARGV[6] == '1' then bump(KEYS[1], 'deliveries', -1) end
if ARGV[11] == '1' then bump(KEYS[1], 'snoozes', 1) end
if ARGV[7] ~= '' then append_error(KEYS[1], now, ARGV[8], ARGV[7], ARGV[9]) end
redis.call('HSET', KEYS[1], 'visible_at', visible_at, 'deadline', 0)
if visible_at <= now then
  redis.call('HSET', KEYS[1], 'state', 'ready')
  redis.call('RPUSH', KEYS[4], id)
else
  redis.call('HSET', KEYS[1], 'state', 'scheduled')
  redis.call('ZADD', KEYS[3], visible_at, id)
end
redis.call('HINCRBY', KEYS[5], ARGV[10], 1)
return 'OK'
