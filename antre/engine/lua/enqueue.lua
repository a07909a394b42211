-- enqueue: store new jobs and make them ready, or scheduled when visible later.
-- KEYS[1] ready (LIST)   KEYS[2] scheduled (ZSET)   KEYS[3] stats (HASH)   KEYS[4] types (SET)
-- KEYS[5] wake (LIST): a token per ready job (at most 16 per call, 64 kept) wakes idle workers
-- KEYS[6] (optional) the queues index (SET, keys.queues_index): the queue's name (the jobs'
-- 'queue' field) is added to it, so one call is the whole enqueue; on a cluster, where that
-- key is in another slot, the client sends that SADD on its own instead
-- ARGV[1] job_prefix   ARGV[2] now_ms   ARGV[3] the n field names: '' for the standard ones
-- (envelope.NEW_FIELDS, written out in store's HSET below), else a JSON array of them; the
-- first three are id, type, visible_at
-- ARGV[4 ..] one JSON array of n string values per job, or a JSON array of such arrays (a
-- chunk of jobs in one argument: Queue.enqueue_many; one decode, and one argument to pack).
-- With the standard fields, a job of nine values has the last five at their defaults
-- (envelope.pack_standard: no lock key, no headers, JobSpec's timeout, lease and deliveries)
-- Each stored job is one HSET of all its fields and its state. Each is indexed by its
-- idempotency key (field 'idem_key', keys.QueueKeys.idem_index: the newest job of a key). A job
-- enqueued with a delay gets an 'enqueued' event (delay_ms); the others' is read from the hash
-- (created_at, trace_id), so an immediate job costs no timeline.
-- Optional fields (present only on such jobs, which then name their fields; see "producer
-- guards" below): ukey + unique_ms (a unique job: the key of its idempotency key's index entry,
-- the unique_for window), sched + tick (a periodic tick: the schedule's state hash and the tick
-- time ms; tick 0 is a manual run, recorded as the schedule's last run without checking or
-- moving its last tick).
-- A job with a lock_key joins its key (turn_join in _turns.lua): the first of a key
-- takes the turn and is placed as above; while the key has a head, a new job waits in state
-- 'waiting' at the end of the key's line (a delayed one too: it keeps its place in the
-- enqueue order, and is scheduled for its visible_at when its turn comes). A job with a group
-- (named field 'fgroup', its slots 'gconc') then asks it for a slot (group_join), or waits in
-- the group's line. A group with a rate (field 'grate', group_rate) may give the job a later
-- start when it takes its slot (rate_start in _groups.lua): it is stored scheduled for then.
-- Returns: array with 1 for each job stored, 0 for a job id that already existed (unchanged),
-- or for a job not stored by a guard: 'dup:<id>' (a pending job holds its idempotency key),
-- 'recent:<id>' (that key's job completed within unique_for), 'tick:<id>' (the schedule's tick
-- was already enqueued, by job <id>), 'paused:' (the schedule is paused; the tick is skipped).
local prefix, now = ARGV[1], tonumber(ARGV[2])
-- The standard fields (envelope.NEW_FIELDS) are written out in store's HSET, in that order
-- (tests/test_core_lua.py checks it); no table of them is built on each call.
local names, pos, n = nil, nil, 14
if ARGV[3] ~= '' then
  names, pos = cjson.decode(ARGV[3]), {}
  for i = 1, #names do pos[names[i]] = i end
  n = #names
end
local idem_at = pos and (pos.idem_key or 0) or 5
local lock_at = pos and (pos.lock_key or 0) or 10
local group_at = pos and (pos.fgroup or 0) or 0  -- a group (fair shares): a named field
local idem_index = idem_index_key(prefix)
-- a key of another type would fail the call after jobs were stored (in no index): refused first
local refused = wrong_type({KEYS[1], 'list', KEYS[2], 'zset', KEYS[3], 'hash', KEYS[4], 'set',
                            KEYS[5], 'list', idem_index, 'hash', KEYS[6] or false, 'set'})
if refused then return refused end
local out = {}
local stored = 0
local readied = {}   -- ids for the ready list: one LPUSH per call (same order as one by one)
local indexed = {}   -- idempotency key, id, ...: one HSET of the index per call
local types = {}     -- job types stored by this call (a list, and a set of them): one SADD

-- producer guards: unique jobs and periodic ticks (only when pos is set) ---------
local pending = {[S.ready] = true, [S.scheduled] = true, [S.inflight] = true, [S.waiting] = true}

local function unique_guard(ukey)
  local held = redis.pcall('GET', ukey)
  if type(held) ~= 'string' then return nil end  -- none, or a damaged entry: not held
  if string.sub(held, 1, 5) == 'done:' then
    redis.call('HINCRBY', KEYS[3], 'enqueue_refused_recent', 1)
    return 'recent:' .. string.sub(held, 6)
  end
  local held_state = redis.pcall('HGET', prefix .. held, 'state')  -- (not a hash: not pending)
  if type(held_state) == 'string' and pending[held_state] then
    redis.call('HINCRBY', KEYS[3], 'enqueue_deduplicated', 1)
    return 'dup:' .. held
  end
  return nil
end

local function tick_guard(sched, tick)
  if tick == 0 then return nil end  -- a manual run ('run now'): recorded, not a tick
  local st = redis.call('HMGET', sched, 'last_tick', 'last_job', 'paused')
  if tonumber(st[1] or '') and tonumber(st[1]) >= tick then return 'tick:' .. (st[2] or '') end
  if st[3] == '1' then
    redis.call('HSET', sched, 'last_tick', tick)
    return 'paused:'
  end
  return nil
end

local function guard(values)
  -- nil: store the job; else the reply for a job that is not stored
  if pos.sched then
    local refused = tick_guard(values[pos.sched], tonumber(values[pos.tick]))
    if refused then return refused end
  end
  if pos.ukey then return unique_guard(values[pos.ukey]) end
  return nil
end

local function claim(values, id)
  -- after storing: the job now holds its idempotency key / its schedule's tick
  if pos.ukey then redis.call('SET', values[pos.ukey], id) end
  if pos.sched then
    redis.call('HSET', values[pos.sched], 'last_job', id, 'last_enqueued_at', now)
    if values[pos.tick] ~= '0' then redis.call('HSET', values[pos.sched], 'last_tick', values[pos.tick]) end
  end
end
-- end of producer guards -------------------------------------------------------------------

local function store(key, id, values)
  -- one HSET: every field and the state; then the job's place (ready list or schedule)
  local visible_at = tonumber(values[3])
  local later = visible_at > now
  local state = later and S.scheduled or S.ready
  local lk = lock_at > 0 and values[lock_at] or ''
  local g = group_at > 0 and values[group_at] or ''
  if pos then
    local fields = {}
    for i = 1, n do
      fields[2 * i - 1] = names[i]
      fields[2 * i] = values[i]
    end
    fields[2 * n + 1] = 'state'
    fields[2 * n + 2] = state
    redis.call('HSET', key, unpack(fields))
  else  -- the standard fields, written out (no table to build and unpack); not the queue's
    -- name (v[4]): the key's tag says it, and every reader is given it
    local v = values
    if not v[10] or v[10] == '' and at_defaults(v[11], v[12], v[13], v[14]) then
      -- no lock key, JobSpec's defaults (at_defaults in _base.lua): none of these fields is
      -- stored; nor, for a job visible at once whose trace is made from its id (v[9] '':
      -- envelope.job_traceparent), that trace or its visible_at (its created_at: every reader
      -- reads an absent one so). Each field less is a shorter walk for every later read and
      -- write of the hash
      if v[9] == '' and v[3] == v[8] then
        redis.call('HSET', key, 'type', v[2], 'idem_key', v[5], 'payload', v[6],
                   'max_attempts', v[7], 'created_at', v[8], 'state', state)
      elseif v[9] == '' then
        redis.call('HSET', key, 'type', v[2], 'visible_at', v[3],
                   'idem_key', v[5], 'payload', v[6], 'max_attempts', v[7], 'created_at', v[8],
                   'state', state)
      else
        redis.call('HSET', key, 'type', v[2], 'visible_at', v[3],
                   'idem_key', v[5], 'payload', v[6], 'max_attempts', v[7], 'created_at', v[8],
                   'trace_id', v[9], 'state', state)
      end
    else
      redis.call('HSET', key, 'type', v[2], 'visible_at', v[3],
                 'idem_key', v[5], 'payload', v[6], 'max_attempts', v[7], 'created_at', v[8],
                 'trace_id', v[9], 'lock_key', v[10], 'headers', v[11], 'timeout_s', v[12],
                 'vt_ms', v[13], 'max_deliveries', v[14], 'state', state)
    end
  end
  -- after the HSET: a group's slots are read from the job ('gconc'); a waiting job's state
  -- and line are written by admit (wait_in)
  local waits = (lk ~= '' or g ~= '') and not admit(prefix, id, lk, g, now)
  if g ~= '' and not waits then  -- its group's rate may start it later (rate_start)
    local due = num_field(key, 'visible_at', visible_at)
    if due > visible_at then
      visible_at, later = due, true
      redis.call('HSET', key, 'state', S.scheduled)
    end
  end
  if not types[values[2]] then
    types[values[2]] = true
    types[#types + 1] = values[2]
  end
  if idem_at > 0 then
    indexed[#indexed + 1] = values[idem_at]
    indexed[#indexed + 1] = id
  end
  if waits then
    tl_add(tl_key(prefix, id), now, S.waiting, 'producer',
           {lock_key = lk, group = g, on = redis.call('HGET', key, 'waits_on')})
  elseif later then
    redis.call('ZADD', KEYS[2], visible_at, id)
    tl_add(tl_key(prefix, id), now, 'enqueued', 'producer', {delay_ms = visible_at - now})
  else
    readied[#readied + 1] = id
  end
end

local qname = nil  -- the queue's name, for KEYS[6]
for a = 4, #ARGV do
  local jobs = cjson.decode(ARGV[a])
  if type(jobs[1]) ~= 'table' then jobs = {jobs} end  -- one job's values
  for j = 1, #jobs do
    local values = jobs[j]
    local id = values[1]
    qname = qname or values[pos and pos.queue or 4]
    local key = prefix .. id
    local refused = pos and guard(values)
    if refused then
      out[#out + 1] = refused
    elseif redis.call('EXISTS', key) == 1 then
      out[#out + 1] = 0
    else
      if pos then claim(values, id) end
      store(key, id, values)
      stored = stored + 1
      out[#out + 1] = 1
    end
  end
end
-- one command per 1,000 arguments (unpack of a very long list would overflow Lua's stack)
for i = 1, #types, 1000 do redis.call('SADD', KEYS[4], unpack(types, i, math.min(i + 999, #types))) end
for i = 1, #indexed, 1000 do  -- pairs: the step is even
  redis.call('HSET', idem_index, unpack(indexed, i, math.min(i + 999, #indexed)))
end
for i = 1, #readied, 1000 do redis.call('LPUSH', KEYS[1], unpack(readied, i, math.min(i + 999, #readied))) end
if stored > 0 then redis.call('HINCRBY', KEYS[3], 'enqueued', stored) end
wake(KEYS[5], #readied)
if KEYS[6] and qname then redis.call('SADD', KEYS[6], qname) end
return out
