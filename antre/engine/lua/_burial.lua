-- Burying a job: error groups, the counters a paced redrive watches, the DLQ entry.
-- Part of the scripts' shared library (_lib.lua lists the parts in order).

-- == Redrives that watch what they replayed ==================================
-- A job replayed by a paced bulk replay carries the task's id (field 'rtask', set by replay.lua;
-- '' for any other replay). When such a job fails again, the task's counters in the queue's
-- HASH '<tag>:rwatch' (keys.QueueKeys.replay_watch) are bumped: '<task>|failed' once per job
-- (its first failure since the replay: a retry at attempt 1, or a death with no retry before),
-- '<task>|died' per death, '<task>|same' when it died in the error group it was replayed from,
-- '<task>|last' the group it died in. antre/control/redrive.py reads them and pauses the task.
-- A job without the field costs nothing more (its value comes with the HMGET bury_job does).
local function redrive_failed(job_key, id, task, died, old_group, group, attempt)
  local w = tag_of(prefix_of(job_key, id)) .. K.replay_watch
  if attempt <= 1 then redis.call('HINCRBY', w, task .. '|failed', 1) end
  if not died then return end
  redis.call('HINCRBY', w, task .. '|died', 1)
  if old_group == group then redis.call('HINCRBY', w, task .. '|same', 1) end
  redis.call('HSET', w, task .. '|last', group)
end

local function eg_count(errgroups, group, rec0, now, eg)
  -- one more job in error group ``group`` (``rec0``: its record when new). ``eg``: a call's
  -- records read so far, written once at its end (eg_flush); nil: read and written here
  local rec = eg and eg[group]
  if not rec then
    local g = redis.call('HGET', errgroups, group)
    local ok = false
    if g then ok, rec = pcall(cjson.decode, g) end
    if not ok or type(rec) ~= 'table' then rec = rec0 end  -- new, or damaged: started again
  end
  rec.total = (tonumber(rec.total) or 0) + 1
  rec.last = now
  if eg then eg[group] = rec else redis.call('HSET', errgroups, group, cjson.encode(rec)) end
end

local function eg_flush(errgroups, eg)
  -- the error groups a call counted (eg_count), one HSET (pcall: the call's replies stand;
  -- eg_count read the key as a hash already, a key of another type failed each burial there)
  local w = {}
  for group, rec in pairs(eg) do w[#w + 1], w[#w + 2] = group, cjson.encode(rec) end
  if #w > 0 then redis.pcall('HSET', errgroups, unpack(w)) end
end

local function bury_job(job_key, id, now, reason, signature, dead, stats, errgroups,
                        type_prefix, group_prefix, row, fields, eg)
  -- moves a job (already removed from its previous place) into the dead-letter indexes.
  -- ``row``: its fields already read (bury_failed); ``fields``: more to write with its state
  -- in the one HSET; ``eg``: the call's error groups (eg_count)
  local bf = row and {row.type, row.waiters, row.rtask, row.group, row.attempt}
             or redis.call('HMGET', job_key, 'type', 'waiters', 'rtask', 'group', 'attempt')
  local jtype = bf[1] or ''
  if jtype == '' then jtype = '(unknown)' end
  local group = string.sub(redis.sha1hex(signature), 1, 12)
  if bf[3] and bf[3] ~= '' then  -- replayed by a paced bulk replay: it failed again
    redrive_failed(job_key, id, bf[3], true, bf[4], group, num_of(bf[5], 0))
  end
  local w = fields or {}
  local n = #w
  w[n + 1], w[n + 2], w[n + 3], w[n + 4] = 'state', S.dead, 'reason', reason
  w[n + 5], w[n + 6], w[n + 7], w[n + 8] = 'finished_at', now, 'group', group
  redis.call('HSET', job_key, unpack(w))
  redis.call('ZADD', dead, now, id)
  redis.call('ZADD', type_prefix .. jtype, now, id)
  redis.call('ZADD', group_prefix .. group, now, id)
  eg_count(errgroups, group, {signature = signature, first = now, total = 0, job_type = jtype,
                              sample = reason}, now, eg)
  redis.call('HINCRBY', stats, 'buried', 1)
  if row then unique_release_key(job_key, id, false, row.ukey)
  else unique_release(job_key, id, false) end
  turn_end(job_key, id, now, row)
  if bf[2] then result_wake(prefix_of(job_key, id), id, bf[2]) end
  -- a member of a flow: its policy decides
  flow_dead(job_key, id, now, reason, row and (row.flow or '') or nil)
  return group
end

local function bury_poison(job_key, id, now, deliveries, maxd, tl, actor, dead, stats, errgroups,
                           type_prefix, group_prefix)
  -- a job delivered max_deliveries times that never finished (its worker died or hung each
  -- time): buried with that reason, the burial on its timeline by ``actor``
  local reason = 'delivered ' .. deliveries .. ' times and never finished: its worker died or ' ..
                 'hung each time (poison job; limit ' .. maxd .. ' deliveries)'
  bury_job(job_key, id, now, reason, 'poison: worker died or hung on every delivery',
           dead, stats, errgroups, type_prefix, group_prefix)
  tl_add(tl, now, 'buried', actor, {reason = reason, kind = 'poison'})
end
