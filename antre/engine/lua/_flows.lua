-- Flows: chains, groups, chords and batches, the jobs of a flow held until their parents settle.
-- A flow (chain, group, chord, batch: antre/flows/) is ordinary jobs of one queue linked as a
-- DAG, all stored by one enqueue_flow.lua call. A job of a flow carries 'flow' (the flow's
-- id), 'fpar' / 'fkids' (JSON arrays: its parents in input order, its dependents), 'fin' (how
-- many parents; the worker reads their results when it starts the job: flow_inputs.lua) and,
-- while a parent is unsettled, 'fdeps' (how many) in state 'held' (ZSET '<tag>:held',
-- keys.QueueKeys.held): never delivered. A batch's callbacks ('fhook': on_success /
-- on_complete) are held jobs of the flow that are not its members. The flow's HASH
-- '<tag>:flow:<id>' (flow_key) keeps its state (running, waiting, failed, succeeded,
-- cancelled; ZSET '<tag>:flows:<state>' lists each), counters (total, done, failed, pending)
-- and policy. A member settles in the script that acks it (ack_job: flow_acked) or makes it
-- dead (bury_job, a discarding cancel: flow_dead), fenced like the ack: its result goes into
-- '<flow>:res' (HASH job id -> result; an id in it is settled, so a duplicate ack, a sweep or
-- a replay never counts it twice), each dependent's 'fdeps' drops by one and one at 0 is
-- placed (admit + place: its lock_key and group apply). A dead member: policy 'ignore' (and a
-- batch) settles it with its error ('!' + JSON {job_id, error}); 'fail' (the default) and
-- 'wait' keep it in SET '<flow>:failed' and its dependents held (flow state failed / waiting)
-- until its replay succeeds, which settles it. A member that goes for good (discarded from the
-- DLQ, purged, cancelled to discard: flow_gone) while it holds its flow gives the flow up: the
-- flow ends failed for good (flow_give_up; 'given_up_at', 'given_up_by'), its held jobs go with
-- it, and from then on a member that dies settles as under 'ignore'. Under 'ignore' and for a
-- batch the dead member had settled already: the flow goes on as before. A flow that reaches a
-- final state pushes one token to LIST '<flow>:wake' (a waiter's BLMOVE of the list onto
-- itself keeps it there).
local FLOW_FINAL = {succeeded = true, failed = true, cancelled = true}

local function flow_key(job_prefix, fid)
  return tag_of(job_prefix) .. K.flow .. fid
end

local function flow_move(job_prefix, fk, fid, to, now)
  -- the flow's state becomes ``to``, its index entry moved; a final state sets finished_at and
  -- the waiters' token, leaving one clears both
  local tag = tag_of(job_prefix)
  local from = redis.call('HGET', fk, 'state') or FS.running
  if from == to then return end
  redis.call('ZREM', tag .. K.flows_by_state .. from, fid)
  redis.call('DEL', fk .. K.flow_wake)
  if FLOW_FINAL[to] then
    redis.call('HSET', fk, 'state', to, 'finished_at', now)
    redis.call('ZADD', tag .. K.flows_by_state .. to, now, fid)
    redis.call('RPUSH', fk .. K.flow_wake, to)
  else
    redis.call('HSET', fk, 'state', to, 'finished_at', 0)
    -- (running: by when it was made; waiting: since when it waits, its retention's clock)
    local score = to == FS.waiting and now or num_field(fk, 'created_at', now)
    redis.call('ZADD', tag .. K.flows_by_state .. to, score, fid)
  end
end

local function flow_place(job_prefix, id, now, after)
  -- a held job of a flow whose parents have all settled: placed as an arriving job (its
  -- lock_key's turn and its group's slot apply), with a 'released' event; its delay_s
  -- ('fdelay', ms) counts from now: due then, scheduled until
  local key = job_prefix .. id
  if redis.call('ZREM', tag_of(job_prefix) .. K.held, id) == 0 then return end
  local f = redis.call('HMGET', key, 'lock_key', 'fgroup', 'fdelay')
  local delay = num_of(f[3], 0)
  redis.call('HDEL', key, 'fdeps', 'fdelay')
  if delay > 0 then redis.call('HSET', key, 'visible_at', now + delay) end
  tl_add_json(tl_key(job_prefix, id), now, 'released', '""', '{"after":' .. cjson.encode(after) ..
              (delay > 0 and (',"delay_ms":' .. delay) or '') .. '}')
  if admit(job_prefix, id, f[1] or '', f[2] or '', now) then place(job_prefix, id, now, false) end
end

local function flow_release(job_prefix, id, now, kids_json)
  -- the dependents of ``id``, which just settled: each one's count of unsettled parents drops
  -- by one, and one at 0 is placed (a dependent whose record is gone or broken is passed over)
  if not kids_json or kids_json == '' then return end
  local ok, kids = pcall(cjson.decode, kids_json)
  if not ok or type(kids) ~= 'table' then return end
  for _, kid in ipairs(kids) do
    local key = job_prefix .. tostring(kid)
    if redis.pcall('HEXISTS', key, 'fdeps') == 1 and
        tonumber(redis.call('HINCRBY', key, 'fdeps', -1)) <= 0 then
      flow_place(job_prefix, tostring(kid), now, id)
    end
  end
end

local function flow_hook(job_prefix, fk, name, now)
  -- a batch's callback ``name`` ('on_success' / 'on_complete'), placed once
  local hid = redis.call('HGET', fk, name)
  if not hid or hid == '' or redis.call('HSETNX', fk, name .. '_at', now) == 0 then return end
  flow_place(job_prefix, hid, now, 'batch')
end

local function flow_check(job_prefix, fk, fid, now)
  -- the flow's state from its counters: with members unsettled (or a batch still open) it is
  -- running, or failed / waiting while a dead member holds it (policies fail / wait); once
  -- all are settled, succeeded (a batch with dead members: failed), and a batch's callbacks
  -- run: on_complete, and on_success when no member is dead
  local f = redis.call('HMGET', fk, 'state', 'pending', 'failed', 'open', 'policy', 'given_up_at')
  if f[1] == FS.cancelled or (f[6] and f[6] ~= '') then return end  -- (given up: failed for good)
  local pending, failed, policy = num_of(f[2], 0), num_of(f[3], 0), f[5] or 'fail'
  if pending > 0 or f[4] == '1' then
    local stuck = failed > 0 and (policy == 'fail' or policy == 'wait')
    flow_move(job_prefix, fk, fid, stuck and (policy == 'wait' and FS.waiting or FS.failed) or FS.running, now)
    return
  end
  flow_hook(job_prefix, fk, 'on_complete', now)
  if failed == 0 then flow_hook(job_prefix, fk, 'on_success', now) end
  flow_move(job_prefix, fk, fid, (failed > 0 and policy == 'batch') and FS.failed or FS.succeeded, now)
end

local function flow_acked(job_key, id, now, result, fid)
  -- a job of flow ``fid`` completed (the caller holds its lease): settle it once
  local prefix = prefix_of(job_key, id)
  local fk = flow_key(prefix, fid)
  if not guard_flow(tag_of(prefix), fk, now) then  -- (its flow was damaged: it goes on alone)
    flow_release(prefix, id, now, redis.call('HGET', job_key, 'fkids'))
    return
  end
  local f = redis.call('HMGET', fk, 'state', 'rmax')
  if not f[1] then  -- its flow's record is gone (removed as damaged): it goes on alone
    flow_release(prefix, id, now, redis.call('HGET', job_key, 'fkids'))
    return
  end
  if f[1] == FS.cancelled then return end
  local j = redis.call('HMGET', job_key, 'fhook', 'fkids')
  if j[1] and j[1] ~= '' then return end  -- a batch's callback: not a member
  if result == '' then result = 'null' end
  local rmax = num_of(f[2], 65536)
  if #result > rmax then
    result = '!' .. cjson.encode({job_id = id, error = 'its result of ' .. #result ..
                                  ' bytes is over the limit of ' .. rmax .. ' (ANTRE_FLOW_RESULT_MAX)'})
  end
  local res = fk .. K.flow_results
  if redis.call('HSETNX', res, id, result) == 0 then  -- settled already, or
    if string.sub(redis.call('HGET', res, id), 1, 1) ~= '!' then return end
    -- its failure was ignored (its dependents ran then), and now it succeeded
    redis.call('HSET', res, id, result)
    redis.call('HINCRBY', fk, 'done', 1)
    redis.call('HINCRBY', fk, 'failed', -1)
    flow_check(prefix, fk, fid, now)
    return
  end
  redis.call('HINCRBY', fk, 'done', 1)
  if redis.call('SREM', fk .. K.flow_failed, id) == 1 then redis.call('HINCRBY', fk, 'failed', -1) end
  local pending = redis.call('HINCRBY', fk, 'pending', -1)
  flow_release(prefix, id, now, j[2])
  -- a running flow with members left stays running (a dead member that holds it would have
  -- made it failed or waiting): the check is for the others
  if pending > 0 and f[1] == FS.running then return end
  flow_check(prefix, fk, fid, now)
end

local function flow_dead(job_key, id, now, reason, fid)
  -- the job at ``job_key`` went to the DLQ (or was discarded): if it is a member of a flow,
  -- the flow's policy decides (see above). One HGET for a job of no flow (none when the
  -- caller read its 'flow' already: ``fid``, '' for none). Returns the flow's id when it
  -- counted the job (a member of a live flow, not settled before), else nil.
  if fid == nil then
    fid = redis.pcall('HGET', job_key, 'flow')  -- (a record that is not a hash: none)
  end
  if type(fid) ~= 'string' or fid == '' then return end
  local prefix = prefix_of(job_key, id)
  local fk = flow_key(prefix, fid)
  if not guard_flow(tag_of(prefix), fk, now) then  -- (its flow was damaged: it goes on alone)
    flow_release(prefix, id, now, redis.pcall('HGET', job_key, 'fkids'))
    return
  end
  local f = redis.call('HMGET', fk, 'state', 'policy', 'given_up_at')
  if not f[1] then  -- its flow's record is gone (removed as damaged): it goes on alone
    flow_release(prefix, id, now, redis.pcall('HGET', job_key, 'fkids'))
    return
  end
  if f[1] == FS.cancelled then return end
  local j = redis.call('HMGET', job_key, 'fhook', 'fkids')
  if (j[1] and j[1] ~= '') or redis.call('HEXISTS', fk .. K.flow_results, id) == 1 then return end
  if f[2] == 'ignore' or f[2] == 'batch' or (f[3] and f[3] ~= '') then
    redis.call('HSET', fk .. K.flow_results, id, '!' .. cjson.encode({job_id = id, error = reason}))
    redis.call('HINCRBY', fk, 'failed', 1)
    redis.call('HINCRBY', fk, 'pending', -1)
    flow_release(prefix, id, now, j[2])
  elseif redis.call('SADD', fk .. K.flow_failed, id) == 1 then
    redis.call('HINCRBY', fk, 'failed', 1)
    redis.call('HSET', fk, 'failed_job', id, 'failed_reason', string.sub(reason, 1, 500))
  end
  flow_check(prefix, fk, fid, now)
  return fid  -- (a member of a live flow that had not settled: flow_gone's cue)
end

local function flow_settle_failed(fk, id, err)
  -- a member settled as failed with ``err`` (once: an id in '<flow>:res' is settled)
  if redis.call('HSETNX', fk .. K.flow_results, id, '!' .. cjson.encode({job_id = id, error = err})) == 1 then
    redis.call('HINCRBY', fk, 'pending', -1)
    return true
  end
  return false
end

local function flow_give_up(prefix, fk, fid, id, now, reason, stats)
  -- ``id``, a dead member that held flow ``fid`` (fail / wait), is gone for good: the flow
  -- can never go on, so it ends failed for good. The member and every other dead member
  -- holding it settle as failed (counted in 'failed' already); each held job of the flow (it
  -- would never start) goes with it (its record, timeline and key index; a member is counted
  -- failed; 'flow_held_dropped' in ``stats``); ready and running ones go on, and settle as
  -- under 'ignore'. One walk of the flow's jobs: a record that is not a hash is passed over.
  flow_settle_failed(fk, id, reason)
  for _, other in ipairs(redis.call('SMEMBERS', fk .. K.flow_failed)) do
    flow_settle_failed(fk, other, 'dead when its flow was given up')
  end
  redis.call('DEL', fk .. K.flow_failed)
  local held, dropped = tag_of(prefix) .. K.held, 0
  for _, jid in ipairs(redis.call('LRANGE', fk .. K.flow_jobs, 0, -1)) do
    local j = redis.pcall('HMGET', prefix .. jid, 'state', 'fhook', 'waiters')
    if not j.err and j[1] == S.held and redis.call('ZREM', held, jid) == 1 then
      if not (j[2] and j[2] ~= '') and flow_settle_failed(fk, jid, 'dropped with its flow: ' .. reason) then
        redis.call('HINCRBY', fk, 'failed', 1)
      end
      result_wake(prefix, jid, j[3])
      forget_job(prefix, jid)
      dropped = dropped + 1
    end
  end
  if dropped > 0 then redis.call('HINCRBY', stats, 'flow_held_dropped', dropped) end
  local why = redis.pcall('HMGET', prefix .. id, 'reason', 'last_error')  -- why it died
  why = (not why.err) and ((why[1] and why[1] ~= '' and why[1]) or why[2]) or nil
  redis.call('HSET', fk, 'given_up_at', now, 'given_up_by', reason, 'failed_job', id,
             'failed_reason', string.sub((why and why ~= '') and why or reason, 1, 500))
  flow_move(prefix, fk, fid, FS.failed, now)
end

local function flow_gone(job_key, id, now, reason, stats)
  -- the job at ``job_key`` leaves for good (discarded, purged; its record still there): a
  -- member of a flow first counts as dead (flow_dead), and one that then holds its flow gives
  -- it up (flow_give_up)
  local fid = flow_dead(job_key, id, now, reason)
  if not fid then return end
  local prefix = prefix_of(job_key, id)
  local fk = flow_key(prefix, fid)
  if redis.call('SISMEMBER', fk .. K.flow_failed, id) == 1 and
      redis.call('HGET', fk, 'state') ~= FS.cancelled then
    flow_give_up(prefix, fk, fid, id, now, reason, stats)
  end
end
