-- ack_many: in-flight -> done for a worker's batch of finished jobs (Queue.ack_many), each only
-- for the holder of its current lease; the same per job as ack.lua (ack_job in _completion.lua:
-- the job's hash, its 'completed' timeline event, its unique key), with the batch's index
-- moves, counters and done-trim in one command each.
-- KEYS[1] inflight (ZSET)   KEYS[2] done (ZSET by finish time)   KEYS[3] stats (HASH)
-- ARGV[1] job_prefix   ARGV[2] now_ms   ARGV[3] keep done jobs this many ms
-- ARGV[4] keep at most this many done jobs   ARGV[5] counter to bump ('acked')
-- ARGV[6 ..] five per job: id, epoch, result JSON ('' for none), the caller's event details
-- as JSON ('' none), and when the job was reserved plain for that epoch (its reserve row said
-- so: ack_job then reads only what such a job can have) its created_at as reserve returned it
-- (for the latency counter), else ''
-- Returns: one reply per job, in order: 'OK', or 'LOST:<why>' (that job left unchanged).
local prefix, now = ARGV[1], tonumber(ARGV[2])
local now_s = ms_text(now)  -- (a number passed to redis.call is printed with %.17g: once here)
local out, acked, added = {}, {}, {}
local latency_total, n = 0, 0
for i = 6, #ARGV - 4, 5 do
  local id = ARGV[i]
  -- (no timeline key: a plain completion by the job's worker, the only kind here, writes no
  -- event, ack_job keeps it in the hash)
  local lost, latency = ack_job(prefix .. id, nil, id, ARGV[i + 1], now,
                                ARGV[i + 2], 'completed', ARGV[i + 3], '',
                                ARGV[i + 4] ~= '' and ARGV[i + 4])
  out[#out + 1] = lost or 'OK'
  if not lost then
    n = n + 1
    acked[n] = id
    added[2 * n - 1], added[2 * n] = now_s, id
    if latency then latency_total = latency_total + latency end
  end
end
if n > 0 then
  redis.call('ZREM', KEYS[1], unpack(acked))
  redis.call('ZADD', KEYS[2], unpack(added))
  redis.call('HINCRBY', KEYS[3], ARGV[5], n)
  if latency_total > 0 then redis.call('HINCRBY', KEYS[3], 'latency_ms_total', latency_total) end
  -- bounded trim of old done jobs: as ack.lua's 20 per ack, in one pass for the batch (at
  -- most 1,000: still more than a call adds, Queue.ack_many sends at most 200 jobs a call)
  trim_done(KEYS[2], prefix, now, tonumber(ARGV[3]), tonumber(ARGV[4]), math.min(20 * n, 1000))
end
return out
