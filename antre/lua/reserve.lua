-- reserve: ready -> in-flight under a lease. Bumps each job's lease epoch and delivery count.
-- KEYS[1] ready (LIST)   KEYS[2] inflight (ZSET by deadline)   KEYS[3] stats (HASH)
-- KEYS[4] paused (HASH: '*' or job type -> JSON)   KEYS[5] parked types (SET)
-- ARGV[1] job_prefix   ARGV[2] now_ms   ARGV[3] max jobs   ARGV[4] worker id
-- ARGV[5] parked-list prefix (+ job type)
-- ARGV[6 ..] the fields to return for each job
-- Returns: array of HMGET arrays (values of ARGV[6 ..]), one per reserved job
-- (deadline = now + the job's vt_ms).
-- Ids whose hash is missing are dropped and counted as 'orphans'. Corrupted counters are
-- read as 0 and a corrupted vt_ms as 30 s, so the job still reaches a worker, which buries it.
-- Paused (incident controls): with '*' in KEYS[4] nothing is reserved. A job whose type is
-- paused is moved, untouched (no epoch, delivery or attempt spent), to its type's parked list,
-- and further ready jobs are popped in its place, at most PARK_MAX parked per call; resuming
-- the type puts the parked list back at the oldest end of ready (unpark.lua).
local prefix, now, count, worker = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
-- >>> incident controls: pause
local PARK_MAX = 256
local npaused = redis.call('HLEN', KEYS[4])
if npaused > 0 and redis.call('HEXISTS', KEYS[4], '*') == 1 then return {} end
local ids
if npaused == 0 then
  ids = redis.call('RPOP', KEYS[1], count)
  if not ids then return {} end
else
  ids = {}
  local parked = 0
  while #ids < count and parked < PARK_MAX do
    local got = redis.call('RPOP', KEYS[1], count - #ids)
    if not got then break end
    for _, id in ipairs(got) do
      local jtype = redis.call('HGET', prefix .. id, 'type')
      if jtype and redis.call('HEXISTS', KEYS[4], jtype) == 1 then
        redis.call('LPUSH', ARGV[5] .. jtype, id)
        redis.call('SADD', KEYS[5], jtype)
        parked = parked + 1
      else
        ids[#ids + 1] = id
      end
    end
  end
  if parked > 0 then redis.call('HINCRBY', KEYS[3], 'parked', parked) end
end
-- <<< incident controls: pause
local fields = {}
for i = 6, #ARGV do fields[#fields + 1] = ARGV[i] end
local out = {}
local orphans = 0
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
    bump(key, 'deliveries', 1)
    redis.call('HSET', key, 'state', 'inflight', 'deadline', deadline, 'reserved_at', now,
               'worker_id', worker)
    redis.call('ZADD', KEYS[2], deadline, id)
    out[#out + 1] = redis.call('HMGET', key, unpack(fields))
  end
end
redis.call('HINCRBY', KEYS[3], 'reserved', #out)
if orphans > 0 then redis.call('HINCRBY', KEYS[3], 'orphans', orphans) end
return out
