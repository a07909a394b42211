-- ack: in-flight -> done, only for the holder of the current lease.
-- KEYS[1] job (HASH)   KEYS[2] inflight (ZSET)   KEYS[3] done (ZSET by finish time)   KEYS[4] stats
-- ARGV[1] id   ARGV[2] epoch   ARGV[3] now_ms   ARGV[4] result JSON ('' for none)
-- ARGV[5] keep done jobs this many ms   ARGV[6] keep at most this many done jobs
-- ARGV[7] job_prefix   ARGV[8] counter to bump ('acked', or 'deduplicated' for idempotency hits)
-- KEYS[5] the job's timeline (LIST; optional)   ARGV[9] the caller's event details as JSON
-- ('' none: the worker's run time, SQL fence)   ARGV[10] actor ('' = the job's worker)
-- A unique job frees its idempotency key's index entry (field 'ukey'), or holds it as
-- 'done:<id>' for its unique_for window (field 'unique_ms'); see unique_release in _base.lua.
-- A worker's batch of acks goes through ack_many.lua (the same per job: ack_job in _completion.lua).
-- Returns: 'OK', or 'LOST:<why>' with nothing changed.
local id, now = ARGV[1], tonumber(ARGV[3])
local kind = ARGV[8] == 'deduplicated' and 'deduplicated' or 'completed'
local lost, latency = ack_job(KEYS[1], KEYS[5], id, ARGV[2], now, ARGV[4], kind, ARGV[9], ARGV[10])
if lost then return lost end
redis.call('ZREM', KEYS[2], id)
redis.call('ZADD', KEYS[3], now, id)
redis.call('HINCRBY', KEYS[4], ARGV[8], 1)
if latency then redis.call('HINCRBY', KEYS[4], 'latency_ms_total', latency) end
trim_done(KEYS[3], ARGV[7], now, tonumber(ARGV[5]), tonumber(ARGV[6]), 20)
return 'OK'
