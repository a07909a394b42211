-- reserve: ready -> in-flight under a lease. Bumps each job's lease epoch and delivery count.
-- KEYS[1] ready (LIST)   KEYS[2] inflight (ZSET by deadline)   KEYS[3] stats (HASH)
-- ARGV[1] job_prefix   ARGV[2] now_ms, or 'server': the server's clock (a reserve sent behind a
-- blocking wait runs when the wait ends, so the client's now would be stale; Queue.wait_and_reserve)
-- ARGV[3] max jobs   ARGV[4] worker id
-- ARGV[5 ..] the fields to return for each job
-- Each reserved job gets a 'reserved' event on its timeline (actor: the worker).
-- Returns: array of HMGET arrays (values of ARGV[5 ..]), one per reserved job
-- (deadline = now + the job's vt_ms).
-- Ids whose hash is missing are dropped and counted as 'orphans'. Corrupted counters are
-- read as 0 and a corrupted vt_ms as 30 s, so the job still reaches a worker, which buries it.
local prefix, now, count, worker = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
if ARGV[2] == 'server' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local ids = redis.call('RPOP', KEYS[1], count)
if not ids then return {} end
local fields = {}
for i = 5, #ARGV do fields[#fields + 1] = ARGV[i] end
local out = {}
local orphans = 0
local worker_json = cjson.encode(worker)
for _, id in ipairs(ids) do
  local key = prefix .. id
  if redis.call('EXISTS', key) == 0 then
    orphans = orphans + 1
  else
    local vt = num_field(key, 'vt_ms', 30000)
    if vt <= 0 or vt > 604800000 then vt = 30000 end
    local deadline = now + vt
    -- a corrupted epoch restarts from now_ms: above any epoch handed out before, so an old
    -- lease can never become valid again
    local epoch = num_field(key, 'epoch', -1)
    if epoch < 0 then epoch = now end
    redis.call('HSET', key, 'epoch', epoch + 1)
    local delivery = bump(key, 'deliveries', 1)
    redis.call('HSET', key, 'state', 'inflight', 'deadline', deadline, 'reserved_at', now,
               'worker_id', worker)
    redis.call('ZADD', KEYS[2], deadline, id)
    tl_add_json(tl_key(prefix, id), now, 'reserved', worker_json,
                string.format('{"epoch":%d,"delivery":%d,"deadline":%d}', epoch + 1, delivery,
                              deadline))
    out[#out + 1] = redis.call('HMGET', key, unpack(fields))
  end
end
redis.call('HINCRBY', KEYS[3], 'reserved', #out)
if orphans > 0 then redis.call('HINCRBY', KEYS[3], 'orphans', orphans) end
return out
