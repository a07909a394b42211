-- Failing jobs: retries, burials of a worker's failures, a dead job's shared traceback.
-- Part of the scripts' shared library (_lib.lua lists the parts in order).

-- == Failing jobs (retry.lua, bury.lua: one job; fail_many.lua: a worker's batch) =====
-- what retry_job reads of the job, in one HMGET (the lease's fields, its gates, a cancel
-- request, the counters it moves, append_error's and the timeline's fields, a replay's task,
-- its key)
local RETRY_ROW = {'state', 'epoch', 'lgates', 'cancel', 'attempt', 'deliveries', 'snoozes',
                   'errors', 'worker_id', 'first_failed_at', 'rtask', 'lock_key', 'tlf',
                   'reserved_at', 'deadline'}

local function retry_job(k, id, epoch, now, visible_at, a)
  -- in-flight -> scheduled at visible_at (ready when visible_at <= now) for the holder of the
  -- lease, or ended as cancelled when an operator asked (cancel_end). k: {job, inflight,
  -- scheduled, ready, stats, timeline (nil: no event), dead, errgroups, cancels (nil: no cancel
  -- check)}; a: {spend, undeliver, error, kind, traceback, counter, note, actor, count_snooze,
  -- keep_turn, dead-by-type prefix, dead-by-group prefix} as retry.lua's ARGV say. One read of
  -- the job's hash and, for a job that keeps its turn, one write. Returns 'OK', 'CANCELLED',
  -- or 'LOST:<why>' with nothing changed.
  local row, lost = leased_row(k[1], epoch, RETRY_ROW)
  if not row then return lost end
  redis.call('ZREM', k[2], id)
  gate_leave(prefix_of(k[1], id), id, now, row.lgates or '')  -- its limit slots pass on
  local w = {}
  tl_pending(k[1], k[6], row, w)  -- the delivery's 'reserved' event first (its 'tlf': in w)
  if k[9] then
    local req = cancel_of(row.cancel)
    if req then
      if #w > 0 then redis.call('HSET', k[1], unpack(w)) end
      cancel_end(k[1], id, now, req, actor_of(k[1], a[8], row),
                 {k[7], k[5], k[8], a[11], a[12]},
                 k[9], k[6], nil, nil)
      return 'CANCELLED'
    end
  end
  if a[1] == '1' then
    row.attempt = num_of(row.attempt, 0) + 1
    w[#w + 1], w[#w + 2] = 'attempt', row.attempt
  end
  if a[2] == '1' then
    row.deliveries = num_of(row.deliveries, 0) - 1
    w[#w + 1], w[#w + 2] = 'deliveries', row.deliveries
  end
  if a[9] == '1' then w[#w + 1], w[#w + 2] = 'snoozes', num_of(row.snoozes, 0) + 1 end
  if a[3] ~= '' then
    append_error(k[1], now, a[4], a[3], a[5], nil, row, w)
    -- a replayed job's first failure since its replay counts for its redrive (redrive_failed)
    if a[1] == '1' and num_of(row.attempt, 0) == 1 and row.rtask and row.rtask ~= '' then
      redrive_failed(k[1], id, row.rtask, false, nil, nil, 1)
    end
  end
  if k[6] then
    local actor = actor_of(k[1], a[8], row)
    if a[6] == 'handed_back' then
      tl_add(k[6], now, 'handed_back', actor, {}, a[7])
    elseif a[3] ~= '' then
      tl_add(k[6], now, 'failed', actor,
             {error = a[3], kind = a[4], traceback = string.sub(a[5], -2000),
              attempt = num_of(row.attempt, 0), attempt_spent = a[1] == '1',
              next_at = visible_at}, a[7])
    else
      tl_add(k[6], now, 'snoozed', actor, {why = a[4], counter = a[6], until_ms = visible_at}, a[7])
    end
  end
  local n = #w
  w[n + 1], w[n + 2], w[n + 3], w[n + 4] = 'visible_at', visible_at, 'deadline', 0
  local waits = false
  if a[10] == '0' then  -- unordered: the turn goes to the next in line, this job joins its end
    redis.call('HSET', k[1], unpack(w))
    w = {}
    local lk, prefix = row.lock_key or '', prefix_of(k[1], id)
    if lk ~= '' and redis.call('HGET', tag_of(prefix) .. K.turns, lk) == id then
      turn_pass(prefix, id, lk, now)
      waits = not turn_join(prefix, id, lk, now)
      -- waiting on its key again: its group's slot goes to the group's next job
      if waits then group_leave(prefix, id, redis.call('HGET', k[1], 'fgroup'), now) end
    end
  end
  if waits then
    -- (state and line written by turn_join)
  elseif visible_at <= now then
    w[#w + 1], w[#w + 2] = 'state', S.ready
    redis.call('HSET', k[1], unpack(w))
    redis.call('RPUSH', k[4], id)
  else
    w[#w + 1], w[#w + 2] = 'state', S.scheduled
    redis.call('HSET', k[1], unpack(w))
    redis.call('ZADD', k[3], visible_at, id)
  end
  redis.call('HINCRBY', k[5], a[6], 1)
  return 'OK'
end

-- == A dead job's traceback, shared by its error group ==============================
-- A burial's traceback is its error group's head (every line but the last) and its own last
-- line (the exception and its message, which differ from job to job). The head is kept once
-- per group in HASH '<tag>:errtb' (keys.QueueKeys.error_tracebacks: group -> head, the first
-- dead job's, removed with the group); a job whose head is that text keeps only its last line,
-- with 'tb_group' naming the group, in its 'errors' entry and in its 'buried' event. The
-- readers (ReadModels.job, Finder.timeline: antre/observe/shared_tb.py) put the two together.
-- A head that differs from the group's (or short: under TB_SHARE_MIN) stays with the job.
local TB_SHARE_MIN = 200

local function tb_share(job_key, id, signature, tb, heads)
  -- the text the job keeps and the group it refers to (nil: the whole text is the job's).
  -- ``heads``: the heads a call has read or stored already, by group (nil: none kept)
  tb = string.sub(tb, 1, 8000)
  local body, nl = tb, ''
  if string.sub(tb, -1) == '\n' then body, nl = string.sub(tb, 1, -2), '\n' end
  local head, tail = string.match(body, '^(.*)\n([^\n]*)$')
  if not head or #head < TB_SHARE_MIN then return tb, nil end
  local group = string.sub(redis.sha1hex(signature), 1, 12)
  local have = heads and heads[group]
  if have == nil then
    local key = tag_of(prefix_of(job_key, id)) .. K.error_tracebacks
    have = redis.pcall('HGET', key, group)
    if have == false then
      if type(redis.pcall('HSET', key, group, head)) ~= 'number' then return tb, nil end
      have = head
    end
    if heads and type(have) == 'string' then heads[group] = have end
  end
  if have ~= head then return tb, nil end
  return tail .. nl, group
end

-- what bury_failed reads of the job, in one HMGET (lease_error's, append_error's, bury_job's,
-- turn_end's, unique_release's and flow_dead's fields)
local BURY_ROW = {'state', 'epoch', 'attempt', 'errors', 'deliveries', 'worker_id',
                  'first_failed_at', 'type', 'waiters', 'rtask', 'group', 'ukey', 'lock_key',
                  'fgroup', 'lgates', 'flow', 'tlf', 'reserved_at', 'deadline'}

local function bury_failed(k, id, epoch, now, a, call)
  -- in-flight -> the DLQ for the holder of the lease, the error kept on the job. k: {job,
  -- inflight, dead, stats, errgroups, timeline (nil: no event)}; a: {reason, error, kind,
  -- traceback, signature, dead-by-type prefix, dead-by-group prefix, spend, note, actor} as
  -- bury.lua's ARGV say. ``call``: what a call's burials share ({heads = {}, eg = {}}: the
  -- tracebacks' heads and the error groups, written once by the caller: eg_flush), or nil.
  -- One read and one write of the job's hash. Returns 'OK:<group>', or 'LOST:<why>' with
  -- nothing changed.
  local row, lost = leased_row(k[1], epoch, BURY_ROW)
  if not row then return lost end
  redis.call('ZREM', k[2], id)
  local w = {'deadline', 0}
  tl_pending(k[1], k[6], row, w)  -- the delivery's 'reserved' event first (its 'tlf': in w)
  if a[8] == '1' then
    row.attempt = num_of(row.attempt, 0) + 1
    w[3], w[4] = 'attempt', row.attempt
  end
  local tb, tb_group = tb_share(k[1], id, a[5], a[4], call and call.heads)
  append_error(k[1], now, a[3], a[2], tb, tb_group, row, w)
  if k[6] then
    tl_add(k[6], now, 'buried', actor_of(k[1], a[10], row),
           {reason = a[1], error = a[2], kind = a[3], traceback = string.sub(tb, -2000),
            tb_group = tb_group}, a[9])
  end
  return 'OK:' .. bury_job(k[1], id, now, a[1], a[5], k[3], k[4], k[5], a[6], a[7], row, w,
                           call and call.eg)
end
