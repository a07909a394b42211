-- reserve: ready -> in-flight under a lease. Bumps each job's lease epoch and delivery count.
-- KEYS[1] ready (LIST)   KEYS[2] inflight (ZSET by deadline)   KEYS[3] stats (HASH)
-- KEYS[4] paused (HASH: '*' or job type -> JSON)   KEYS[5] parked types (SET)
-- KEYS[6] tombstones (STRING counter of purged ids still marked in the lists)
-- KEYS[7] dead (ZSET)   KEYS[8] errgroups (HASH)   KEYS[9] quarantine (LIST)
-- KEYS[10] cancels (HASH; optional): a ready job that holds an operator's cancel request (put
-- back by a version that did not end it) is not reserved: it ends as cancelled (cancel_end)
-- ARGV[1] job_prefix   ARGV[2] now_ms, or 'server': the server's clock (a reserve sent behind a
-- blocking wait runs when the wait ends, so the client's now would be stale; Queue.wait_and_reserve)
-- ARGV[3] max jobs   ARGV[4] worker id
-- ARGV[5] parked-list prefix (+ job type)
-- ARGV[6] dead-by-type prefix   ARGV[7] dead-by-group prefix
-- ARGV[8 ..] (optional) the fields to return for each job; none: RESERVE_FIELDS
-- Each reserved job's 'reserved' event is kept in its hash (the fields written here), not
-- written to its timeline: "A delivery's routine events" in _lib.lua.
-- Returns: array of rows (values of ARGV[8 ..], or RESERVE_FIELDS), one per reserved job
-- (deadline = now + the job's vt_ms); a plain job's row stops before the optional fields.
-- Ids whose hash is missing are dropped and counted as 'orphans'. Corrupted counters are
-- read as 0 and a corrupted vt_ms as 30 s, so the job still reaches a worker, which buries it.
-- A record that is not a hash goes to the DLQ here and one whose id is not ASCII, or that is
-- missing, to the quarantine (see "Records that are not job hashes" in _lib.lua; counted as
-- 'corrupt' and 'orphans'): each alone, the batch's other jobs are reserved as usual. A job
-- whose id is not UTF-8 is reserved like any other (no check here: the hot path stays as it
-- was); the client finds it when it decodes the reply and quarantines it (quarantine.lua).
-- Paused (incident controls): with '*' in KEYS[4] nothing is reserved. A job whose type (or
-- group: 'group=<name>' in KEYS[4], its parked list ARGV[5] .. 'group=<name>') is
-- paused is moved, untouched (no epoch, delivery or attempt spent), to its type's parked list,
-- and further ready jobs are popped in its place (at most SKIP_MAX stepped over per call); resuming
-- the type puts the parked list back at the oldest end of ready (unpark.lua). Ids starting with
-- '{' are the marks purge.lua leaves in place of removed jobs: dropped here, and counted off.
-- Limit gates: a job of a type with declared limits ('<tag>:lactive') whose gate's
-- rate gives it a later start waits in scheduled for it; one whose gate's slots are all in
-- flight waits in the gate's line (gate_take in _gates.lua; stats 'limit_held' counts both). A
-- ready job of a group whose slots an operator lowered below those its jobs hold gives its
-- slot back and waits at the front of the group's line (group_over; counted there too).
-- A group's share of a batch: a call takes at most ceil(slots / SPREAD) jobs of one group (one
-- when it has SPREAD slots or fewer); the rest stay at the oldest end of ready, untouched, for
-- the next runner's reserve (woken for them). A group's slots are all its ready and running
-- jobs: one runner's batch taking them all would run them one after another.
local prefix, now, count, worker = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
if ARGV[2] == 'server' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- >>> incident controls: pause, purge marks
local SKIP_MAX = 500  -- parked jobs and purge marks stepped over per call, at most
-- the three controls below are hashes that exist only while they hold something: one EXISTS
-- when none does (the usual queue), their sizes only when one does
local tag = tag_of(prefix)
local npaused, ngates, ngover = 0, 0, 0
if redis.call('EXISTS', KEYS[4], tag .. K.gate_active, tag .. K.group_limits) > 0 then
  guard(tag, tag .. K.gate_active, R.gate_active, now)
  guard(tag, tag .. K.group_limits, R.group_limits, now)
  npaused = redis.call('HLEN', KEYS[4])
  ngates = redis.call('HLEN', tag .. K.gate_active)
  ngover = redis.call('HLEN', tag .. K.group_limits)
end
if npaused > 0 and redis.call('HEXISTS', KEYS[4], '*') == 1 then return {} end
local function paused_type(id)
  -- the job's type when that type is paused, else 'group=<its group>' when its group is
  -- paused ('=' is in no job type), else nil
  if npaused == 0 then return nil end
  local f = redis.pcall('HMGET', prefix .. id, 'type', 'fgroup')  -- (not a hash: dealt with below)
  if f.err then return nil end
  if type(f[1]) == 'string' and redis.call('HEXISTS', KEYS[4], f[1]) == 1 then return f[1] end
  if type(f[2]) == 'string' and f[2] ~= '' and redis.call('HEXISTS', KEYS[4], 'group=' .. f[2]) == 1 then
    return 'group=' .. f[2]
  end
  return nil
end
local ids, parked, tombs, held = {}, 0, 0, 0
-- limit gates ("Limit gates" in _lib.lua): a job of a type with declared limits
-- that its gate holds back is moved to the gate's line or to scheduled, untouched
-- (ngates: the types with declared limits, above)
-- a group's slots lowered by an operator hold here: a ready job over them gives its slot back
-- and waits at the front of its group's line (group_over in _groups.lua; while any group has one:
-- ngover, above)
local back = {}
while #ids < count and parked + tombs + held < SKIP_MAX do
  local want = count - #ids
  local got = redis.call('RPOP', KEYS[1], want)
  if not got then break end
  for _, id in ipairs(got) do
    local jtype = nil
    if string.byte(id, 1) == 123 then
      tombs = tombs + 1
    else
      jtype = paused_type(id)
      if jtype then
        redis.call('LPUSH', ARGV[5] .. jtype, id)
        redis.call('SADD', KEYS[5], jtype)
        parked = parked + 1
      elseif ngover > 0 and group_over(prefix, id, now, back) then
        held = held + 1
      elseif ngates > 0 and gate_take(prefix, id, now) then
        held = held + 1
      else
        ids[#ids + 1] = id
      end
    end
  end
  if #got < want then break end  -- the list is empty now
end
if parked > 0 then redis.call('HINCRBY', KEYS[3], 'parked', parked) end
if tombs > 0 then redis.call('DECRBY', KEYS[6], tombs) end
if held > 0 then redis.call('HINCRBY', KEYS[3], 'limit_held', held) end
if ngover > 0 then group_over_end(prefix, back) end
if #ids == 0 then return {} end
-- <<< incident controls
-- the fields returned per job: the library's RESERVE_FIELDS (Queue's, written into _lib.lua
-- by scripts.py), laid out once (reserve_layout; with Redis Functions once per server, not per
-- call: the names are no longer sent with every reserve); a caller may still name its own in
-- ARGV[8 ..] (laid out for that call). A plain job (no field but PLAIN_FIELDS and its state)
-- is read with one HMGET and HLEN, and its row stops before the optional fields ("What
-- reserve returns per job" in _lib.lua)
local L = RESERVE_DEFAULT
if #ARGV > 7 then
  local names = {}
  for i = 8, #ARGV do names[#names + 1] = ARGV[i] end
  L = reserve_layout(names)
end
local core, cpos, extra, epos = L.core, L.cpos, L.extra, L.epos
local nret, ncore, nextra, identity, tail = L.nret, L.ncore, L.nextra, L.identity, L.tail
local c_type, nread, fast = L.c_type, L.nread, L.fast
local e_vt, e_ep, e_cancel, e_dl = L.e_vt, L.e_ep, L.e_cancel, L.e_dl
local p_id = L.p_id
-- >>> a group's share of a batch
local SPREAD = 8  -- a group's slots are spread over at least this many batches (runners)
local grouped = nil  -- whether a group holds slots (a ready grouped job holds one): looked at
local function any_group()  -- once, at the first job that is not plain (a plain job has no group)
  if grouped == nil then grouped = redis.call('EXISTS', tag .. K.group_slots) == 1 end
  return grouped
end
local shares, later = {}, {}
local function over_share(key, id)
  -- whether this call took its share of ``id``'s group already (``id`` is left ready: later)
  local g = redis.call('HGET', key, 'fgroup')
  if not g or g == '' then return false end
  local n = shares[g] or 0
  if n > 0 and n >= math.ceil(group_limit(prefix, id, g, now) / SPREAD) then
    later[#later + 1] = id
    return true
  end
  shares[g] = n + 1
  return false
end
-- <<< a group's share of a batch
local out, deadlines = {}, {}
local orphans, corrupt = 0, 0
local dlq = {KEYS[7], KEYS[3], KEYS[8], ARGV[6], ARGV[7]}
local now_s = string.format('%d', now)
local plain_deadline = string.format('%d', now + 30000)  -- (a plain job's lease: the default)
local p_epoch, p_deliveries, p_state = L.p_epoch, L.p_deliveries, L.p_state
local p_deadline, p_reserved_at, p_worker = L.p_deadline, L.p_reserved_at, L.p_worker
for _, id in ipairs(ids) do
  local key = prefix .. id
  local r = redis.pcall('HMGET', key, unpack(core))
  -- x: EXTRA's values, read unless the job is plain (its fields: those found and its state;
  -- "What reserve returns per job" in _lib.lua); nfields 0: no record
  local x, nfields, plain = nil, 0, false
  if not r.err then
    local found = 0
    for i = 1, nread do if r[i] then found = found + 1 end end
    nfields = redis.call('HLEN', key)
    plain = nfields == found + 1
    if not plain and nfields > 0 then x = redis.call('HMGET', key, unpack(extra)) end
  end
  local cancel = x and x[e_cancel]  -- (a flow's cancel marks its ready jobs too: read for every job)
  if plain and fast and r[c_type] then
    -- a plain job, the default layout: its first lease (epoch and delivery 1, the default 30 s
    -- lease); its row is the plain fields, the id and reserved_at, the client knows the rest
    -- (the written fields: envelope.from_row)
    redis.call('HSET', key, 'epoch', '1', 'deliveries', '1', 'state', S.inflight,
               'deadline', plain_deadline, 'reserved_at', now_s, 'worker_id', worker)
    deadlines[#deadlines + 1] = plain_deadline
    deadlines[#deadlines + 1] = id
    r[nread + 1], r[nread + 2] = id, now_s
    out[#out + 1] = r
  elseif r.err then
    if bad_id(id) then
      quarantine(KEYS[9], KEYS[3], now, id, 'job id is not ASCII text (found by reserve)')
    else
      bury_not_hash(prefix, id, now, 'reserve', dlq)
    end
    corrupt = corrupt + 1
  elseif nfields == 0 then
    quarantine(KEYS[9], KEYS[3], now, id, 'job record is missing (found by reserve)')
    orphans = orphans + 1
  elseif KEYS[10] and cancel and cancel ~= '' then
    cancel_end(key, id, now, cancel_of(cancel), worker, dlq, KEYS[10],
               tl_key(prefix, id), nil, nil)
  elseif any_group() and over_share(key, id) then  -- (left ready for the next call: later)
  else
    local vt = x and num_of(x[e_vt], 30000) or 30000
    if vt <= 0 or vt > 604800000 then vt = 30000 end
    local deadline = string.format('%d', now + vt)
    -- a job stored without an epoch is a new job (enqueue writes no counters): 0; a corrupted
    -- epoch, or a hash without its type (not a job's record), restarts from now_ms: above any
    -- epoch handed out before, so an old lease can never become valid again
    local old = x and x[e_ep]
    local epoch = num_of(old, -1)
    if epoch < 0 then
      epoch = (not old and r[c_type]) and 0 or now
    end
    epoch = string.format('%d', epoch + 1)
    local delivery = x and string.format('%d', num_of(x[e_dl], 0) + 1) or '1'
    -- this delivery's 'reserved' event is kept in the hash (the fields written here; "A
    -- delivery's routine events" in _lib.lua); a job delivered before first writes out the
    -- last delivery's, when nothing else did (its fields are overwritten now)
    if old then tl_pending(key, tl_key(prefix, id), nil) end
    redis.call('HSET', key, 'epoch', epoch, 'deliveries', delivery, 'state', S.inflight,
               'deadline', deadline, 'reserved_at', now_s, 'worker_id', worker)
    deadlines[#deadlines + 1] = deadline
    deadlines[#deadlines + 1] = id
    local row = r
    if not identity then
      row = {}
      for i = 1, ncore do row[cpos[i]] = r[i] end
    end
    local stop = nret
    if x then
      for i = 1, nextra do row[epos[i]] = x[i] end
    elseif tail then
      stop = nret - nextra
    else
      for i = 1, nextra do row[epos[i]] = false end
    end
    if p_epoch then row[p_epoch] = epoch end
    if p_deliveries then row[p_deliveries] = delivery end
    if p_state then row[p_state] = S.inflight end
    if p_deadline then row[p_deadline] = deadline end
    if p_reserved_at then row[p_reserved_at] = now_s end
    if p_worker then row[p_worker] = worker end
    if p_id then row[p_id] = id end  -- the id it was popped by (the key's; the hash holds none)
    for i = #row, stop + 1, -1 do row[i] = nil end
    out[#out + 1] = row
  end
  if #deadlines >= 400 then  -- (unpack's stack is bounded)
    redis.call('ZADD', KEYS[2], unpack(deadlines))
    deadlines = {}
  end
end
if #deadlines > 0 then redis.call('ZADD', KEYS[2], unpack(deadlines)) end
if #later > 0 then  -- back at the oldest end, in the order they were popped: the next to go
  local back_ids = {}
  for i = #later, 1, -1 do back_ids[#back_ids + 1] = later[i] end
  redis.call('RPUSH', KEYS[1], unpack(back_ids))
  wake(tag .. K.wake, #later)
end
redis.call('HINCRBY', KEYS[3], 'reserved', #out)
if orphans > 0 then redis.call('HINCRBY', KEYS[3], 'orphans', orphans) end
if corrupt > 0 then redis.call('HINCRBY', KEYS[3], 'corrupt', corrupt) end
return out
