-- Completing jobs (ack.lua, one job; ack_many.lua, a worker's batch) and trimming done jobs.
-- Part of the scripts' shared library (_lib.lua lists the parts in order).

-- == Completing jobs (ack.lua, one job; ack_many.lua, a worker's batch) =========================
-- A job reserved plain ("What reserve returns per job" in _reserve.lua; the client says so, with the
-- job's created_at as the reserve returned it) has none of the fields a completion acts on but
-- 'waiters' (a producer may start waiting at any time): a plain completion of such a job reads
-- three fields, not eleven (a field a hash does not hold is a walk of all it holds).
-- ack_job's read: ACK_ROW, or its first three.
local ACK_ROW = {'state', 'epoch', 'waiters', 'created_at', 'worker_id', 'reserved_at', 'ukey',
                 'lock_key', 'fgroup', 'flow', 'lgates'}
local ACK_PLAIN = {'state', 'epoch', 'waiters'}

local function ack_job(key, tl, id, epoch, now, result, kind, note, actor, plain)
  -- in-flight -> done for the holder of the lease: the job's hash and its timeline event, with
  -- one read (HMGET) and one write (HSET) of the hash. The caller moves the id from inflight
  -- to done and counts it. Returns nil and the job's end-to-end latency in ms (nil when its
  -- created_at is unusable), or a 'LOST:...' string with nothing changed. ``tl``: the job's
  -- timeline (nil: no event). A job with a lock_key passes its key's turn (turn_pass), one
  -- with a group its slot (group_leave). ``plain``: the job was reserved plain for this epoch
  -- (its created_at, for the latency; nil or false: it was not).
  -- A plain completion by the job's worker is kept in the hash (its note in 'dnote': "A
  -- delivery's routine events" above); another kind (a duplicate's) or another actor is
  -- written out, after the delivery's pending 'reserved' event
  local kept = not tl or (kind == 'completed' and (not actor or actor == ''))
  local whole = not (plain and kept)
  local f = redis.pcall('HMGET', key, unpack(whole and ACK_ROW or ACK_PLAIN))
  if f.err then return 'LOST:job record is not a hash' end  -- (the sweeper buries it)
  if not f[1] then return 'LOST:job does not exist' end
  if f[1] ~= S.inflight then return 'LOST:job is ' .. f[1] end
  if f[2] ~= epoch then return 'LOST:lease epoch is ' .. tostring(f[2]) .. ', not ' .. epoch end
  if not kept then
    tl_pending(key, tl, nil)
    if not actor or actor == '' then actor = f[5] or '' end
    local detail = '{"result":' .. cjson.encode(string.sub(result, 1, 500)) ..
                   ',"since_reserved_ms":' ..
                   string.format('%d', now - (num_of(f[6], now))) .. '}'  -- (%d: no float printf)
    tl_add_json(tl, now, kind, cjson.encode(actor), detail, note)
  end
  if kept and note and note ~= '' then
    redis.call('HSET', key, 'state', S.done, 'finished_at', ms_text(now), 'result', result,
               'dnote', note)
  else
    redis.call('HSET', key, 'state', S.done, 'finished_at', ms_text(now), 'result', result)
  end
  if f[3] then result_wake(prefix_of(key, id), id, f[3]) end
  if whole then
    unique_release_key(key, id, true, f[7])
    if f[11] then gate_leave(prefix_of(key, id), id, now, f[11]) end
    if f[9] and f[9] ~= '' then group_leave(prefix_of(key, id), id, f[9], now) end
    if f[8] and f[8] ~= '' then turn_pass(prefix_of(key, id), id, f[8], now) end
    if f[10] and f[10] ~= '' then flow_acked(key, id, now, result, f[10]) end  -- a flow's
  end
  local created = num_of(whole and f[4] or plain, 0)
  if created > 0 and created <= now then return nil, now - created end
  return nil, nil
end

local function trim_done(done, prefix, now, keep_ms, max_count, limit)
  -- bounded trim of old done jobs: at most ``limit`` of those finished more than keep_ms ago,
  -- else (none that old) of the oldest past max_count; each is forgotten (hash, timeline,
  -- index entry)
  local old = redis.call('ZRANGEBYSCORE', done, '-inf', now - keep_ms, 'LIMIT', 0, limit)
  if #old == 0 then
    local excess = redis.call('ZCARD', done) - max_count
    if excess > 0 then old = redis.call('ZRANGE', done, 0, math.min(excess, limit) - 1) end
  end
  if #old == 0 then return end
  for _, oid in ipairs(old) do forget_job(prefix, oid) end
  redis.call('ZREM', done, unpack(old))
end
