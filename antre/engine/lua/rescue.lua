-- rescue: a worker process that stopped beating (killed, or paused past the tolerance) is
-- lost: every lease it holds in this partition is returned at once, as sweep_expired.lua
-- returns one whose deadline passed (one delivery spent: -> ready, or -> dead when delivered
-- max_deliveries times; a job with an operator's cancel request ends as cancelled), without
-- waiting for the deadline. Each returned job's lease epoch is bumped (and its 'tlf' with it:
-- no pending 'reserved' event is left for the new epoch), so the lost process, if it was only
-- paused and wakes up, holds a lease of no job: its ack, retry, extension or checkpoint is
-- refused (LOST) and its SQL completion fenced out by the next delivery's newer epoch.
-- KEYS[1] beats (ZSET worker id -> last beat ms)   KEYS[2] inflight   KEYS[3] ready
-- KEYS[4] dead   KEYS[5] stats   KEYS[6] errgroups   KEYS[7] cancels   KEYS[8] wake
-- ARGV[1] job_prefix   ARGV[2] now_ms   ARGV[3] cutoff ms: a process whose beat is at or after
-- it is alive (it beat since the caller read) and keeps its jobs
-- ARGV[4] dead-by-type prefix   ARGV[5] dead-by-group prefix
-- ARGV[6] how many in-flight entries to look at, at most (a bound on the call's time)
-- ARGV[7] where to start in the in-flight jobs: a deadline ('-inf': from the first) and
-- ARGV[8] how many jobs at exactly that deadline an earlier call looked at and left
-- ARGV[9] '1': the processes were found lost by an earlier call of the same pass (their beats
-- are gone; one that beat again since has woken up and keeps the rest), '0': judge them here
-- ARGV[10 ..] pairs: a worker id the caller found silent, the beat ms it saw (several
-- processes lost together, as a host or a pool dies, cost one walk of the in-flight jobs)
-- Each lost process's beat is removed (a later beat of a process that was only paused writes
-- it again). The in-flight jobs are looked at in deadline order (their 'worker_id'); a record
-- that is not a hash, or missing, is left in flight for the sweeper (sweep_expired.lua deals
-- with it at its deadline), so no job ends in no list. A partition with more in-flight jobs
-- than ARGV[6] takes several calls, each going on where the last one stopped.
-- Each returned job gets a 'swept' event by the 'rescuer' saying "worker <id> lost (no
-- heartbeat for N s)", the same as its error (kind 'worker_lost'); stats 'expired' and 'lost'.
-- Returns: {returned count, buried count, next deadline ('' when the walk is done), next
-- count at it, number of processes lost, their ids ..., then id, outcome, worker id and
-- lock_key ('' for none) for each job}. The business lock a lost process may still hold on a
-- job's key lives in another slot: the caller releases it (Locks.release_lost). A process that
-- beat at or after the cutoff, or has no beat and was not judged before (it stopped, or
-- another rescuer was first), is not among them.
local prefix, now, cutoff = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local limit, judged = tonumber(ARGV[6]), ARGV[9] == '1'
local msgs, lost = {}, {}
for i = 10, #ARGV - 1, 2 do
  local worker, seen = ARGV[i], tonumber(ARGV[i + 1]) or now
  local beat = tonumber(redis.call('ZSCORE', KEYS[1], worker))
  if not msgs[worker] and ((beat and beat < cutoff) or (not beat and judged)) then
    if beat then redis.call('ZREM', KEYS[1], worker) end
    msgs[worker] = 'worker ' .. worker .. ' lost (no heartbeat for ' ..
                   string.format('%.1f', math.max(0, now - (beat or seen)) / 1000) .. ' s)'
    lost[#lost + 1] = worker
  end
end
local out = {0, 0, '', 0, #lost}
for _, w in ipairs(lost) do out[#out + 1] = w end
if #lost == 0 then return out end
local dlq = {KEYS[4], KEYS[5], KEYS[6], ARGV[4], ARGV[5]}
local returned, buried = 0, 0
local from, skip = ARGV[7], tonumber(ARGV[8]) or 0
local entries = redis.call('ZRANGEBYSCORE', KEYS[2], from, '+inf', 'WITHSCORES', 'LIMIT', skip,
                           limit)
-- where the next call goes on: the last deadline looked at, and how many jobs at it stay
local at = from
local left_at = from ~= '-inf' and skip or 0
for i = 1, #entries, 2 do
  local id, score = entries[i], entries[i + 1]
  if score ~= at then at, left_at = score, 0 end
  local key = prefix .. id
  local worker = redis.pcall('HGET', key, 'worker_id')
  local msg = type(worker) == 'string' and msgs[worker]
  if not (msg and not bad_id(id) and redis.call('HGET', key, 'state') == S.inflight) then
    left_at = left_at + 1
  else
    redis.call('ZREM', KEYS[2], id)
    local tl = tl_key(prefix, id)
    tl_pending(key, tl, nil)  -- the delivery's 'reserved' event first (_timeline.lua)
    local epoch = string.format('%d', num_field(key, 'epoch', 0) + 1)
    redis.call('HSET', key, 'epoch', epoch, 'tlf', epoch, 'deadline', 0)
    local deliveries = num_field(key, 'deliveries', 0)
    local lkey = redis.call('HGET', key, 'lock_key') or ''  -- its lock: the caller's to free
    local req = cancel_of(redis.call('HGET', key, 'cancel'))
    if req then
      tl_add(tl, now, 'swept', 'rescuer', {worker = worker, delivery = deliveries,
                                           outcome = 'cancelled', reason = msg})
      local ended = cancel_end(key, id, now, req, 'rescuer', dlq, KEYS[7], tl, nil, nil)
      out[#out + 1], out[#out + 2], out[#out + 3], out[#out + 4] = id, ended, worker, lkey
      buried = buried + 1
    else
      gate_leave(prefix, id, now, nil)  -- its limit slots pass on
      local maxd = num_field(key, 'max_deliveries', 10)
      append_error(key, now, 'worker_lost', msg .. ' (delivery ' .. deliveries .. ')', '')
      redis.call('HINCRBY', KEYS[5], 'expired', 1)
      redis.call('HINCRBY', KEYS[5], 'lost', 1)
      tl_add(tl, now, 'swept', 'rescuer', {worker = worker, delivery = deliveries,
                                           outcome = deliveries >= maxd and S.dead or S.ready,
                                           reason = msg})
      if deliveries >= maxd then
        bury_poison(key, id, now, deliveries, maxd, tl, 'rescuer', KEYS[4], KEYS[5], KEYS[6],
                    ARGV[4], ARGV[5])
        buried = buried + 1
        out[#out + 1], out[#out + 2], out[#out + 3], out[#out + 4] = id, S.dead, worker, lkey
      else
        redis.call('HSET', key, 'state', S.ready)
        redis.call('RPUSH', KEYS[3], id)  -- the oldest end: the next reserve takes it
        returned = returned + 1
        out[#out + 1], out[#out + 2], out[#out + 3], out[#out + 4] = id, S.ready, worker, lkey
      end
    end
  end
end
wake(KEYS[8], returned)
out[1], out[2] = returned, buried
if #entries >= 2 * limit then out[3], out[4] = at, left_at end
return out
