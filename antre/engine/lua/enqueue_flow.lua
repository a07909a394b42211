-- enqueue_flow: store a flow (chain, group, chord, batch: antre/flows/) and all its jobs, or
-- add jobs to an open batch: all or nothing (every check comes before the first write).
-- KEYS[1] ready (LIST)   KEYS[2] scheduled (ZSET)   KEYS[3] stats (HASH)   KEYS[4] types (SET)
-- KEYS[5] wake (LIST)   KEYS[6] held (ZSET)   KEYS[7] the flow (HASH)   KEYS[8] its jobs (LIST)
-- KEYS[9] the idempotency-key index (HASH)   KEYS[10] (optional) the queues index (SET)
-- ARGV[1] job_prefix   ARGV[2] now_ms   ARGV[3] 'new' | 'add'
-- ARGV[4] 'new': the flow's fields as a JSON object of strings (id, queue, kind, policy,
-- description, rmax, open, on_success, on_complete; state, counters and times are set here);
-- 'add': ''
-- ARGV[5 ..] one job per argument: a JSON array of its hash's field names and values, in
-- pairs (id first, then type; the flow fields 'flow', 'fdeps', 'fpar', 'fkids', 'fin', 'fhook'
-- where they apply). A job with 'fdeps' > 0 waits in state 'held' for its parents (see
-- _flows.lua; its delay, kept as 'fdelay', starts when they have settled); any other is placed as enqueue.lua places a job (its lock_key's turn
-- and its group's slot apply: admit), ready or scheduled. A batch's callbacks ('fhook') are
-- stored, not counted as members.
-- Returns: 'OK'; 'EXISTS:<id>' (a job or the flow id exists already), 'GONE' (add: no such
-- flow), 'CLOSED:<state>' (add: the batch is closed) with nothing stored.
local prefix, now, mode = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local fk = KEYS[7]
local fid = string.sub(fk, #tag_of(prefix) + #K.flow + 1)  -- '<tag>:flow:<id>'

-- every check first ----------------------------------------------------------------------
if mode == 'new' then
  if redis.call('EXISTS', fk) == 1 then return 'EXISTS:' .. fid end
else
  local f = redis.call('HMGET', fk, 'state', 'open')
  if not f[1] then return 'GONE' end
  if f[2] ~= '1' or f[1] == FS.cancelled then return 'CLOSED:' .. f[1] end
end
local jobs = {}
for a = 5, #ARGV do
  local pairs_ = cjson.decode(ARGV[a])
  local fields = {}
  for i = 1, #pairs_, 2 do fields[pairs_[i]] = pairs_[i + 1] end
  if redis.call('EXISTS', prefix .. fields.id) == 1 then return 'EXISTS:' .. fields.id end
  jobs[#jobs + 1] = {pairs_, fields}
end

-- then the writes --------------------------------------------------------------------------
local readied, types, members, ids = {}, {}, 0, {}
for _, job in ipairs(jobs) do
  local pairs_, f = job[1], job[2]
  local id, key = f.id, prefix .. f.id
  local held = num_of(f.fdeps, 0) > 0 or (f.fhook or '') ~= ''
  pairs_[#pairs_ + 1] = 'state'
  pairs_[#pairs_ + 1] = held and S.held or S.ready
  redis.call('HSET', key, unpack(pairs_))
  ids[#ids + 1] = id
  if (f.fhook or '') == '' then members = members + 1 end
  if not types[f.type] then
    types[f.type] = true
    redis.call('SADD', KEYS[4], f.type)
  end
  if (f.idem_key or '') ~= '' then redis.call('HSET', KEYS[9], f.idem_key, id) end
  if held then
    -- its delay_s counts from its release (flow_place), not from now
    local due = num_field(key, 'visible_at', now)
    if due > now then redis.call('HSET', key, 'fdelay', due - now) end
    redis.call('ZADD', KEYS[6], now, id)
    tl_add(tl_key(prefix, id), now, S.held, 'producer', {flow = fid, parents = num_of(f.fdeps, 0)})
  elseif admit(prefix, id, f.lock_key or '', f.fgroup or '', now) then
    local due = num_field(key, 'visible_at', now)
    if due > now then
      redis.call('HSET', key, 'state', S.scheduled)
      redis.call('ZADD', KEYS[2], due, id)
      tl_add(tl_key(prefix, id), now, 'enqueued', 'producer', {delay_ms = due - now, flow = fid})
    else
      readied[#readied + 1] = id
    end
  else
    tl_add(tl_key(prefix, id), now, S.waiting, 'producer',
           {lock_key = f.lock_key or '', group = f.fgroup or '', on = redis.call('HGET', key, 'waits_on')})
  end
end
for i = 1, #ids, 1000 do redis.call('RPUSH', KEYS[8], unpack(ids, i, math.min(i + 999, #ids))) end
for i = 1, #readied, 1000 do
  redis.call('LPUSH', KEYS[1], unpack(readied, i, math.min(i + 999, #readied)))
end
wake(KEYS[5], #readied)
if #ids > 0 then redis.call('HINCRBY', KEYS[3], 'enqueued', #ids) end

if mode == 'new' then
  local meta = cjson.decode(ARGV[4])
  local fields = {'state', FS.running, 'total', members, 'pending', members, 'done', 0,
                  'failed', 0, 'created_at', now, 'finished_at', 0}
  for name, value in pairs(meta) do
    fields[#fields + 1] = name
    fields[#fields + 1] = tostring(value)
  end
  redis.call('HSET', fk, unpack(fields))
  redis.call('ZADD', tag_of(prefix) .. K.flows_by_state .. FS.running, now, fid)
  if members == 0 and meta.open ~= '1' then flow_check(prefix, fk, fid, now) end
else
  redis.call('HINCRBY', fk, 'total', members)
  redis.call('HINCRBY', fk, 'pending', members)
end
if KEYS[10] then redis.call('SADD', KEYS[10], redis.call('HGET', fk, 'queue') or '') end
return 'OK'
