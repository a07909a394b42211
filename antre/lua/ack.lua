-- ack: in-flight -> done, only for the holder of the current lease.
-- KEYS[1] job (HASH)   KEYS[2] inflight (ZSET)   KEYS[3] done (ZSET by finish time)   KEYS[4] stats
-- ARGV[1] id   ARGV[2] epoch   ARGV[3] now_ms   ARGV[4] result JSON ('' for none)
-- ARGV[5] keep done jobs this many ms   ARGV[6] keep at most this many done jobs
-- ARGV[7] job_prefix   ARGV[8] counter to bump ('acked', or 'deduplicated' for idempotency hits)
-- KEYS[5] the job's timeline (LIST; optional)   ARGV[9] the caller's event details as JSON
-- ('' none: the worker's run time, SQL fence)   ARGV[10] actor ('' = the job's worker)
-- A unique job frees its idempotency key's index entry (field 'ukey'), or holds it as
-- 'done:<id>' for its unique_for window (field 'unique_ms'); see unique_release in _lib.lua.
-- Returns: 'OK', or 'LOST:<why>' with nothing changed.
local id, epoch, now = ARGV[1], ARGV[2], tonumber(ARGV[3])
local lost = lease_error(KEYS[1], epoch)
if lost then return lost end
if KEYS[5] then
  local kind = ARGV[8] == 'deduplicated' and 'deduplicated' or 'completed'
  local w = redis.call('HMGET', KEYS[1], 'worker_id', 'reserved_at')
  local actor = (ARGV[10] and ARGV[10] ~= '') and ARGV[10] or (w[1] or '')
  tl_add(KEYS[5], now, kind, actor, {result = string.sub(ARGV[4], 1, 500),
                                     since_reserved_ms = now - (tonumber(w[2]) or now)}, ARGV[9])
end
redis.call('ZREM', KEYS[2], id)
redis.call('HSET', KEYS[1], 'state', 'done', 'finished_at', now, 'result', ARGV[4])
redis.call('ZADD', KEYS[3], now, id)
redis.call('HINCRBY', KEYS[4], ARGV[8], 1)
unique_release(KEYS[1], id, true)
local created = num_field(KEYS[1], 'created_at', 0)
if created > 0 and created <= now then
  redis.call('HINCRBY', KEYS[4], 'latency_ms_total', now - created)
end
-- bounded trim of old done jobs (at most 20 per ack)
local old = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now - tonumber(ARGV[5]), 'LIMIT', 0, 20)
local excess = redis.call('ZCARD', KEYS[3]) - tonumber(ARGV[6])
if excess > 0 and #old == 0 then
  old = redis.call('ZRANGE', KEYS[3], 0, math.min(excess, 20) - 1)
end
for _, oid in ipairs(old) do
  forget_job(ARGV[7], oid)
  redis.call('ZREM', KEYS[3], oid)
end
return 'OK'
