-- Shared helpers, prepended to every script by antre/engine/scripts.py (not a script of its own).
-- Job hashes live at job_prefix .. id; all keys of a queue share one hash tag, so the keys a
-- script derives from a prefix are in the slot of the keys it declares.

local function num_of(raw, default)
  -- a job hash value (a string, or false/nil when missing) as an integer; garbage, NaN and
  -- infinities read as ``default`` (a script must never fail half-way: Redis does not roll
  -- back what it already changed)
  local v = tonumber(raw or '')
  if not v or v ~= v or v == math.huge or v == -math.huge then return default end
  return math.floor(v)
end

local function num_field(key, field, default)
  -- a job hash field as an integer (num_of)
  return num_of(redis.call('HGET', key, field), default)
end

local function bump(key, field, by)
  -- HINCRBY that survives a corrupted field
  local v = num_field(key, field, 0) + by
  redis.call('HSET', key, field, v)
  return v
end

local function wake(wake_key, n)
  -- tokens for idle workers blocked on the wake list (BLPOP): a few per call, capped
  -- (LTRIM only when the push took the list past 64: one call, not two, in the common case)
  if n > 0 then
    local tokens = {}
    for i = 1, math.min(n, 16) do tokens[i] = '1' end
    if redis.call('LPUSH', wake_key, unpack(tokens)) > 64 then
      redis.call('LTRIM', wake_key, 0, 63)
    end
  end
end

local function leased_row(job_key, epoch, names)
  -- the caller holds the lease (state inflight, same epoch): the job's fields ``names`` (state
  -- and epoch first), read in the same HMGET, as a table by name (absent fields false); else
  -- nil and a LOST:... string (a record that is not a hash is LOST too: the sweeper sends it
  -- to the DLQ)
  local f = redis.pcall('HMGET', job_key, unpack(names))
  if f.err then return nil, 'LOST:job record is not a hash' end
  if not f[1] then return nil, 'LOST:job does not exist' end
  if f[1] ~= 'inflight' then return nil, 'LOST:job is ' .. f[1] end
  if f[2] ~= epoch then
    return nil, 'LOST:lease epoch is ' .. tostring(f[2]) .. ', not ' .. epoch
  end
  local row = {}
  for i, name in ipairs(names) do row[name] = f[i] end
  return row
end

local LEASE_ROW = {'state', 'epoch'}

local function lease_error(job_key, epoch)
  -- nil when the caller holds the lease; else leased_row's LOST:... string
  local _, lost = leased_row(job_key, epoch, LEASE_ROW)
  return lost
end

local function append_error(job_key, now, kind, err, tb, tb_group, row, out)
  -- keeps the last 20 attempts' errors on the job for the DLQ detail page (one read, one
  -- write). The latest traceback is the last entry's: no second copy in a 'traceback' field
  -- (envelope.py reads the entry, a job stored before keeps its field unread; issue 29).
  -- ``row``: the job's fields already read (bury_failed: no read here); ``out``: a list the
  -- fields to write are appended to, for the caller's one HSET (nil: written here)
  local f = row and {row.errors, row.attempt, row.deliveries, row.worker_id, row.first_failed_at}
            or redis.call('HMGET', job_key, 'errors', 'attempt', 'deliveries', 'worker_id',
                          'first_failed_at')
  local list = {}
  if f[1] and f[1] ~= '' then
    local ok, decoded = pcall(cjson.decode, f[1])
    if ok and type(decoded) == 'table' then list = decoded end
  end
  for _, e in ipairs(list) do  -- bounded: an older attempt keeps its traceback's last 2,000
    if type(e) == 'table' and type(e.traceback) == 'string' and #e.traceback > 2000 then
      e.traceback = string.sub(e.traceback, -2000)
    end
  end
  list[#list + 1] = {at = now, kind = kind, error = err, traceback = string.sub(tb, 1, 8000),
                     attempt = num_of(f[2], 0), delivery = num_of(f[3], 0), worker = f[4] or '',
                     tb_group = tb_group}  -- (tb_group: the text is tb_share's tail)
  while #list > 20 do table.remove(list, 1) end
  local w = out or {}
  if not f[5] or f[5] == '' or f[5] == '0' then
    w[#w + 1], w[#w + 2] = 'first_failed_at', now
  end
  local n = #w
  w[n + 1], w[n + 2], w[n + 3], w[n + 4] = 'errors', cjson.encode(list), 'last_error', err
  w[n + 5], w[n + 6], w[n + 7], w[n + 8] = 'error_kind', kind, 'last_failed_at', now
  if not out then redis.call('HSET', job_key, unpack(w)) end
end

local function unique_release_key(job_key, id, keep, ukey)
  -- unique_release with the job's 'ukey' field already read (false/nil/'': not a unique job)
  if not ukey or ukey == '' or redis.pcall('GET', ukey) ~= id then return end
  local window = keep and (tonumber(redis.call('HGET', job_key, 'unique_ms') or '') or 0) or 0
  if window > 0 then
    redis.call('SET', ukey, 'done:' .. id, 'PX', math.floor(window))
  else
    redis.call('DEL', ukey)
  end
end

local function unique_release(job_key, id, keep)
  -- a unique job ended: free its idempotency key's index entry (issue 13), or, when it
  -- completed (keep) with a unique_for window, hold the key as 'done:<id>' for that window
  unique_release_key(job_key, id, keep, redis.call('HGET', job_key, 'ukey'))
end

-- == Job timelines and the idempotency-key index (issue 11) ===================================
-- A job's timeline is a LIST '<tag>:tl:<id>' (keys.QueueKeys.timeline), oldest event first,
-- at most TL_CAP (see tl_elide); scripts given only the job prefix '<tag>:job:' derive it with tl_key (and
-- the index, keys.QueueKeys.idem_index '<tag>:idem', with idem_index_key). Every event is one
-- JSON object: {"t": ms, "k": kind, "a": actor, "d": {details}, "x": the caller's own JSON}.
-- A job hash that is deleted takes its timeline and its index entry with it (forget_job).
-- A failure's traceback keeps its last 2,000 characters here (the job's 'errors' keep 8,000).
local TL_CAP = 100

local function tl_key(job_prefix, id)
  return string.sub(job_prefix, 1, -5) .. 'tl:' .. id
end

local function jlog_key(job_prefix, id)  -- a job's own log (note_log, below)
  return string.sub(job_prefix, 1, -5) .. 'jlog:' .. id
end

local function idem_index_key(job_prefix)
  return string.sub(job_prefix, 1, -5) .. 'idem'
end

-- == Producers waiting for a job's end (issue 26) ================================================
-- A producer waiting for a job (result_wait.lua) counts itself in the job's field 'waiters';
-- the script that ends the job (ack_job, bury_job, cancel_end's discard, purge.lua) pushes
-- that many tokens to the job's LIST '<tag>:rwake:<id>' (keys.QueueKeys.result_wake), which
-- expires RESULT_WAKE_MS later, and clears the count. A job nobody waits for pays nothing:
-- the field comes with the read the ending script already does.
local RESULT_WAKE_MS = 60000

local function result_wake(job_prefix, id, n)
  n = num_of(n, 0)
  if n <= 0 then return end
  local wk = string.sub(job_prefix, 1, -5) .. 'rwake:' .. id
  local left = math.min(n, 100000)
  while left > 0 do
    local tokens = {}
    for i = 1, math.min(left, 1000) do tokens[i] = '1' end
    redis.pcall('LPUSH', wk, unpack(tokens))  -- (pcall: a key of another type loses the wake)
    left = left - #tokens
  end
  redis.pcall('PEXPIRE', wk, RESULT_WAKE_MS)
  redis.pcall('HDEL', job_prefix .. id, 'waiters')
end

local ms_n, ms_s = nil, ''  -- the last time formatted: a call's events share their now
local function ms_text(now)
  -- ``now`` (ms) as digits, formatted once per call rather than per job
  if now ~= ms_n then ms_n, ms_s = now, string.format('%d', now) end
  return ms_s
end

-- Past TL_CAP events the timeline keeps its first TL_HEAD (the enqueue, the first reserve and
-- hand-back) and its newest, and drops from between them: the event at index TL_HEAD becomes an
-- 'elided' marker {"t": first dropped, "k": "elided", "n": how many, "l": last dropped}.
-- Checkpoints and a worker's lease extensions do not pile up: one in a row with the same kind
-- (and, for 'extended', the same "by") among the last two events (the other one also of those
-- kinds, so no transition is passed over) is replaced by one event {"t": first, "n": count,
-- "l": last, ...newest actor and details} (tl_coalesce): a job that checkpoints every 0.5 s
-- and is extended by its heartbeat keeps two events, not a hundred.
local TL_HEAD = 10
local TL_GONE = '\0gone'

local function tl_last_ms(ev)
  return string.match(ev, '^{"t":%d+,"k":"[%w_]+","n":%d+,"l":(%d+)') or
         string.match(ev, '^{"t":(%d+)') or '0'
end

local function tl_elide(key)
  -- the list is one past TL_CAP: the event at TL_HEAD becomes the marker (when it is not one
  -- yet), and the event after the marker is dropped into its count
  local at = redis.call('LINDEX', key, TL_HEAD) or ''
  local n = tonumber(string.match(at, '^{"t":%d+,"k":"elided","n":(%d+)') or '')
  local first = string.match(at, '^{"t":(%d+)') or '0'
  if not n then n = tonumber(string.match(at, '^{"t":%d+,"k":"[%w_]+","n":(%d+)') or '') or 1 end
  local gone = redis.call('LINDEX', key, TL_HEAD + 1) or ''
  local dropped = tonumber(string.match(gone, '^{"t":%d+,"k":"[%w_]+","n":(%d+)') or '') or 1
  redis.call('LSET', key, TL_HEAD + 1, TL_GONE)
  redis.call('LREM', key, 1, TL_GONE)
  redis.call('LSET', key, TL_HEAD, '{"t":' .. first .. ',"k":"elided","n":' .. (n + dropped) ..
             ',"l":' .. tl_last_ms(gone) .. ',"a":"","d":{}}')
end

local COALESCED = {checkpoint = true, extended = true}

local function tl_coalesce(key, now, kind, by, rest)
  -- true when the event (``rest``: its text after the kind) was folded into a recent one
  local tail = redis.pcall('LRANGE', key, -2, -1)
  if type(tail) ~= 'table' then return false end
  for back = #tail, 1, -1 do
    local ev = tail[back]
    local t, k = string.match(ev, '^{"t":(%d+),"k":"([%w_]+)"')
    if not k or not COALESCED[k] then return false end
    if k == kind and (not by or string.find(ev, by, 1, true)) then
      local n = tonumber(string.match(ev, '^{"t":%d+,"k":"[%w_]+","n":(%d+)') or '') or 1
      redis.call('LSET', key, back - #tail - 1, '{"t":' .. t .. ',"k":"' .. kind .. '","n":' ..
                 (n + 1) .. ',"l":' .. ms_text(now) .. rest)
      return true
    end
  end
  return false
end

local function tl_add_json(key, now, kind, actor_json, detail_json, extra)
  -- actor and details already JSON-encoded (the hot paths build them once, or by hand);
  -- one RPUSH in the common case
  local rest = ',"a":' .. actor_json .. ',"d":' .. detail_json
  if extra and extra ~= '' then rest = rest .. ',"x":' .. extra end
  rest = rest .. '}'
  if COALESCED[kind] then
    local by = kind == 'extended' and string.match(detail_json, '"by":"[%w_]+"') or nil
    if by ~= '"by":"operator"' and tl_coalesce(key, now, kind, by, rest) then return end
  end
  -- pcall: a timeline key of another type loses the event, never the job's move
  local n = redis.pcall('RPUSH', key, '{"t":' .. ms_text(now) .. ',"k":"' .. kind .. '"' .. rest)
  if type(n) == 'number' and n > TL_CAP then tl_elide(key) end
end

local function tl_add(key, now, kind, actor, detail, extra)
  tl_add_json(key, now, kind, cjson.encode(actor or ''), cjson.encode(detail or {}), extra)
end

-- == What a standard enqueue leaves out (issue 29) ===============================================
local function at_defaults(headers, timeout_s, vt_ms, max_deliveries)
  -- true for JobSpec's defaults as envelope.encode_new writes them (no headers, a 30 s timeout
  -- and lease, 10 deliveries): enqueue.lua and enqueue_one.lua then store none of these fields
  -- (nor an empty lock key), and every reader reads an absent one as that default
  return headers == '{}' and timeout_s == '30.0' and vt_ms == '30000' and max_deliveries == '10'
end

-- == A delivery's routine events, kept in the job's hash (issue 29 item 1) =====================
-- reserve writes no 'reserved' event and ack_many no 'completed' one: the job's hash holds
-- both already (epoch, deliveries, reserved_at, worker_id and vt_ms; state 'done', finished_at,
-- result and the worker's note 'dnote'), and the timeline's reader (Finder.timeline) shows
-- them from there. Whatever else happens to a job that may have been reserved writes the
-- pending 'reserved' event into the list first (tl_pending, at its own time), so the list
-- keeps the order things happened in; the hash's 'tlf' then names the epoch whose event is in
-- the list. A 'completed' event is never pending under another: done is final (a done job is
-- only forgotten, hash and timeline together). A plain job that succeeds has no timeline key.
local TLP_ROW = {'epoch', 'tlf', 'reserved_at', 'worker_id', 'deliveries', 'deadline'}

local function tl_pending(job_key, tl, row, out)
  -- write the pending 'reserved' event of the job's current epoch, if any, at its own time.
  -- ``row``: the job's fields of TLP_ROW by name (the caller's read; nil: read here);
  -- ``out``: a list the 'tlf' field is appended to, for the caller's one HSET (nil: written
  -- here). Callers write it before they change the lease's fields. (Made from the stored
  -- strings, without number formatting or library globals beyond one pattern: this runs on
  -- every failure's path.)
  if not tl then return end
  local f = row
  if not f then
    local r = redis.pcall('HMGET', job_key, unpack(TLP_ROW))
    if r.err then return end
    f = {epoch = r[1], tlf = r[2], reserved_at = r[3], worker_id = r[4], deliveries = r[5],
         deadline = r[6]}
  end
  local e, at = f.epoch, f.reserved_at
  if not e or e == f.tlf or not at then return end
  local dl, dd = f.deliveries or '0', f.deadline
  -- the reservation's deadline is the hash's until the lease ends (an extension writes this
  -- event out before it moves it); a lease ended without writing it (deadline 0): from vt_ms
  if not dd or dd == '0' then dd = nil end
  -- reserve wrote these as digits; anything else (a damaged record): no event
  if not string.find(at .. ',' .. e .. ',' .. dl .. ',' .. (dd or '0'),
                     '^%d%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?%d?,%d+,%d+,%d+$') then
    return
  end
  if not dd then
    local vt = num_of(redis.call('HGET', job_key, 'vt_ms'), 30000)
    if vt <= 0 or vt > 604800000 then vt = 30000 end
    dd = string.format('%d', tonumber(at) + vt)
  end
  local n = redis.pcall('RPUSH', tl, '{"t":' .. at .. ',"k":"reserved","a":' ..
                        cjson.encode(f.worker_id or '') .. ',"d":{"epoch":' .. e ..
                        ',"delivery":' .. dl .. ',"deadline":' .. dd .. '}}')
  if type(n) == 'number' and n > TL_CAP then tl_elide(tl) end
  if out then
    out[#out + 1], out[#out + 2] = 'tlf', e
  else
    redis.call('HSET', job_key, 'tlf', e)
  end
end

local function unindex_key(index, ikey, id)
  -- the index keeps the newest job of a key: only that job's end removes the entry
  if ikey and ikey ~= '' and redis.call('HGET', index, ikey) == id then
    redis.call('HDEL', index, ikey)
  end
end

local function forget_job(job_prefix, id)
  local key = job_prefix .. id
  local ikey = redis.pcall('HGET', key, 'idem_key')  -- (not a hash: nothing indexed)
  if type(ikey) == 'string' then unindex_key(idem_index_key(job_prefix), ikey, id) end
  redis.call('DEL', key, tl_key(job_prefix, id), jlog_key(job_prefix, id))
end

local function actor_of(job_key, given, row)
  -- the caller's actor (an operator, the sweeper), else the worker holding the job (from
  -- ``row`` when the caller read the job's fields already: leased_row)
  if given and given ~= '' then return given end
  if row then return row.worker_id or '' end
  return redis.call('HGET', job_key, 'worker_id') or ''
end

-- == Per-key turns (issue 23) ===================================================================
-- Jobs of one queue that share a lock_key run one at a time, in the order they joined. The
-- key's head, whose turn it is (HASH '<tag>:kturn' lock_key -> id, keys.QueueKeys.turns), is a
-- job like any other: ready (or parked), scheduled or in flight. The others wait in the key's
-- line (LIST '<tag>:kline:<lock_key>', LPUSH newest, RPOP oldest) in state 'waiting', indexed by
-- the ZSET '<tag>:waiting' (score: when they joined): never delivered, no attempt, no snooze.
-- A head that ends (done, dead, gone, or retried unordered) passes the turn in the same script:
-- turn_pass makes the oldest waiting job the head and puts it where a job goes (ready now, or
-- scheduled when its visible_at is later). An id in a line that is no longer in 'waiting'
-- (purged) is stepped over, once.
local function tag_of(job_prefix)
  return string.sub(job_prefix, 1, -5)  -- '<tag>:job:' -> '<tag>:'
end

local function prefix_of(job_key, id)
  return string.sub(job_key, 1, #job_key - #id)
end

-- == A job's own log ================================================================================
-- The lines a handler logged while it ran (antre/observe/joblog.py) come with its settle, after
-- the worker's note past a NUL (JSON text holds none): note_log, called by each settling
-- function once the lease is known to be the caller's, appends them to the job's log key
-- (STRING '<tag>:jlog:<id>', keys.QueueKeys.job_log: JSON lines, oldest first) and gives back
-- the note alone. Past JLOG_KEEP bytes the key keeps this delivery's lines only. A handler
-- that logged nothing sends no NUL: one string.find, no key. forget_job deletes the key.
local JLOG_KEEP = 98304  -- joblog.KEEP_BYTES


local function note_log(job_key, id, note)
  if not note or note == '' then return note end
  local i = string.find(note, '\0', 1, true)
  if not i then return note end
  local k, lines = jlog_key(prefix_of(job_key, id), id), string.sub(note, i + 1)
  local n = redis.pcall('APPEND', k, lines)
  if type(n) ~= 'number' or n > JLOG_KEEP then  -- (another type, or too long: this one alone)
    redis.pcall('SET', k, lines)
  end
  return string.sub(note, 1, i - 1)
end

-- Groups (fair shares): a job with a group ('fgroup') holds one of its group's slots while it
-- is ready, scheduled or in flight (SET '<tag>:gheld:<group>'); a group has 'gconc' slots (its
-- jobs' group_concurrency, GROUP_WINDOW when none; an operator's override in HASH
-- '<tag>:glimits', group_override). A job finding them all taken waits in the group's line
-- ('<tag>:gline:<group>') and takes the slot a leaving job frees (group_leave). With at most
-- that many ready jobs per group, a group of a million jobs and a group of ten both have their
-- share of the ready list: reserve itself is unchanged. ZSETs '<tag>:gwait' / '<tag>:gslots' (group -> jobs waiting /
-- slots held) are the Groups page's bounded index. A job with a lock_key is first its key's
-- head, then asks its group for a slot. A waiting job's field 'waits_on' says which line.
local GROUP_WINDOW = 128  -- a group naming no group_concurrency (see bench/results/perkey.md)

local function place(job_prefix, id, now, oldest_end)
  -- a job whose turn came: ready (at the oldest end of the list: the next to run; else at the
  -- newest, behind the other groups' ready jobs), or scheduled when its visible_at is later
  local tag, key = tag_of(job_prefix), job_prefix .. id
  local visible = num_field(key, 'visible_at', 0)
  if visible > now then
    redis.call('HSET', key, 'state', 'scheduled')
    redis.call('ZADD', tag .. 'scheduled', visible, id)
  else
    redis.call('HSET', key, 'state', 'ready')
    redis.call(oldest_end and 'RPUSH' or 'LPUSH', tag .. 'ready', id)
    wake(tag .. 'wake', 1)
  end
end

local function wait_in(job_prefix, line, id, now, on, group)
  -- ``id`` waits at the end of ``line`` ('lock' or 'group': field 'waits_on')
  redis.call('LPUSH', line, id)
  redis.call('ZADD', tag_of(job_prefix) .. 'waiting', now, id)
  redis.call('HSET', job_prefix .. id, 'state', 'waiting', 'waits_on', on)
  if group then redis.call('ZINCRBY', tag_of(job_prefix) .. 'gwait', 1, group) end
end

local function pop_waiting(job_prefix, line, group)
  -- the oldest id of ``line`` still waiting (ids purged meanwhile are dropped), or nil
  local tag = tag_of(job_prefix)
  while true do
    local nxt = redis.call('RPOP', line)
    if not nxt then return nil end
    if group and tonumber(redis.call('ZINCRBY', tag .. 'gwait', -1, group)) <= 0 then
      redis.call('ZREM', tag .. 'gwait', group)
    end
    if redis.call('ZREM', tag .. 'waiting', nxt) == 1 then
      redis.call('HDEL', job_prefix .. nxt, 'waits_on')
      return nxt
    end
  end
end

-- Limit gates (issue 23 item 3): a job type's or downstream's concurrency and rate, held in the
-- queue at reserve instead of delivered and snoozed. A worker declares the limits of the
-- handlers it serves (gates_declare.lua): HASH '<tag>:lactive' job type -> its gates
-- ('type:<t>', 'ds:<name>', space-separated), HASH '<tag>:lconc' gate -> slots, HASH
-- '<tag>:lrate' gate -> '<n>/<window ms>'; an operator's override, HASH '<tag>:lover' gate ->
-- '<slots>|<until ms>|<n>/<window ms>' (either part '' when not overridden; until 0: until
-- cleared; gate_override.lua). Reserve (gate_take) first checks each gate's concurrency (SET
-- '<tag>:lheld:<gate>', the ids in flight): a gate at its limit puts the job, untouched, at the
-- end of the gate's line (LIST '<tag>:lline:<gate>', state 'waiting', waits_on 'limit', field
-- 'gate') holding no rate start (one it was given is dropped: a job that cannot start uses up
-- no start of the window); no lease, no delivery, no attempt, no snooze. Else the job takes a
-- start under each gate's rate, the latest any of them gives (ZSET '<tag>:lstart:<gate>' the
-- starts of the last window and those ahead): a later start makes it wait in 'scheduled' for
-- it, as a group rate's (field 'gate' says which), holding no slot; a start now takes the slots. Whichever script takes a job out of flight (ack, retry,
-- snooze, hand-back, bury, sweep, cancel: gate_leave) frees its slots ('lgates') and moves as
-- many of the line's oldest jobs as slots are free to the oldest end of ready, in the same
-- call. A slot whose job is no longer in flight (removed by hand) is freed by the next reserve
-- that finds its gate full, one per call.
local function gate_override(tag, gate, now)
  -- the live override of ``gate``: slots (or nil), rate (or nil)
  local raw = redis.call('HGET', tag .. 'lover', gate)
  if not raw then return nil, nil end
  local n, untl, rate = string.match(raw, '^(%d*)|(%d+)|(.*)$')
  if not untl or (untl ~= '0' and tonumber(untl) <= now) then return nil, nil end
  return tonumber(n), (rate ~= '' and rate or nil)
end

local function gate_limits(tag, gate, now)
  -- ``gate``'s slots (nil: no concurrency limit) and rate (n, window ms; nil: none) now
  local n, rate = gate_override(tag, gate, now)
  if not n then n = tonumber(redis.call('HGET', tag .. 'lconc', gate) or '') end
  rate = rate or redis.call('HGET', tag .. 'lrate', gate)
  local rn, rw = nil, nil
  if rate then
    rn, rw = string.match(rate, '^(%d+)/(%d+)$')
    rn, rw = tonumber(rn), tonumber(rw)
    if not rn or rn < 1 or not rw or rw < 1 then rn, rw = nil, nil end
  end
  return n, rn, rw
end

local function gate_next(id, tag, gate, now, rn, rw)
  -- ``id``'s start under ``gate``'s rate (rn per rw ms), not taken yet: one given before and
  -- not yet past its window is kept; else the next free one
  local starts = tag .. 'lstart:' .. gate
  local given = tonumber(redis.call('ZSCORE', starts, id) or '')
  if given and given + rw > now then return given end
  redis.call('ZREMRANGEBYSCORE', starts, '-inf', now - rw)
  local nth = redis.call('ZREVRANGE', starts, rn - 1, rn - 1, 'WITHSCORES')
  if nth[2] and tonumber(nth[2]) + rw > now then return tonumber(nth[2]) + rw end
  return now
end

local function gate_start(tag, gate, id, at, now, rw)
  -- ``id`` takes its start ``at`` under ``gate``'s rate (the key expires a window after it)
  local starts = tag .. 'lstart:' .. gate
  redis.call('ZADD', starts, at, id)
  if redis.call('PTTL', starts) < at - now + rw then redis.call('PEXPIRE', starts, at - now + rw) end
end

local function gate_mend(prefix, held)
  -- frees one slot of ``held`` whose job is no longer in flight (removed by hand; 'ready':
  -- taken by this reserve call a moment ago)
  local one = redis.call('SRANDMEMBER', held)
  local st = one and redis.call('HGET', prefix .. one, 'state')
  if one and st ~= 'inflight' and st ~= 'ready' then
    redis.call('SREM', held, one)
  end
end

local function gate_take(prefix, id, now)
  -- at reserve: nil when ``id`` may be reserved (its gates' slots taken: field 'lgates'),
  -- else where it went instead: 'line' (a gate's slots are all in flight: it takes no start,
  -- and drops one it was given) or 'rate' (scheduled for its start: the latest any of its
  -- gates' rates gives, taken under each of them; no slot is taken)
  local t = redis.pcall('HGET', prefix .. id, 'type')
  if type(t) ~= 'string' then return nil end  -- (missing, or not a hash: reserve deals with it)
  local tag = tag_of(prefix)
  local gates = redis.call('HGET', tag .. 'lactive', t)
  if not gates then return nil end
  local take, rated, at, why = {}, {}, now, nil
  for gate in string.gmatch(gates, '%S+') do
    local n, rn, rw = gate_limits(tag, gate, now)
    if n then
      local held = tag .. 'lheld:' .. gate
      if redis.call('SCARD', held) >= n then gate_mend(prefix, held) end
      if redis.call('SCARD', held) >= n then
        for g2 in string.gmatch(gates, '%S+') do redis.call('ZREM', tag .. 'lstart:' .. g2, id) end
        wait_in(prefix, tag .. 'lline:' .. gate, id, now, 'limit', nil)
        redis.call('HSET', prefix .. id, 'gate', gate)
        return 'line'
      end
      take[#take + 1] = gate
    end
    if rn then
      rated[#rated + 1] = {gate, rw}
      local start = gate_next(id, tag, gate, now, rn, rw)
      if start > at then at, why = start, gate end
    end
  end
  for _, g in ipairs(rated) do gate_start(tag, g[1], id, at, now, g[2]) end
  if at > now then
    redis.call('HSET', prefix .. id, 'state', 'scheduled', 'visible_at', at, 'gate', why)
    redis.call('ZADD', tag .. 'scheduled', at, id)
    return 'rate'
  end
  if #take > 0 then
    for _, gate in ipairs(take) do redis.call('SADD', tag .. 'lheld:' .. gate, id) end
    redis.call('HSET', prefix .. id, 'lgates', table.concat(take, ' '))
  end
  redis.call('HDEL', prefix .. id, 'gate')  -- (what it waited for, if it did)
  return nil
end

local function gate_fill(prefix, gate, now)
  -- as many of ``gate``'s waiting jobs as it has free slots (at most 100 per call) go to the
  -- oldest end of ready, where reserve takes them next
  local tag = tag_of(prefix)
  local n = gate_limits(tag, gate, now)
  local free = 100
  if n then free = math.min(100, n - redis.call('SCARD', tag .. 'lheld:' .. gate)) end
  local moved = {}
  for _ = 1, free do
    local nxt = pop_waiting(prefix, tag .. 'lline:' .. gate, nil)
    if not nxt then break end
    redis.call('HDEL', prefix .. nxt, 'gate')
    redis.call('HSET', prefix .. nxt, 'state', 'ready')
    table.insert(moved, 1, nxt)  -- newest first: the oldest is RPUSHed last, reserved first
  end
  if #moved == 0 then return end
  redis.call('RPUSH', tag .. 'ready', unpack(moved))
  wake(tag .. 'wake', #moved)
end

local function gate_leave(prefix, id, now, gates)
  -- ``id`` left flight: its gates' slots (``gates``: its 'lgates', read by the caller or here)
  -- pass to the gates' waiting jobs
  gates = gates or redis.call('HGET', prefix .. id, 'lgates')
  if not gates or gates == '' then return end
  redis.call('HDEL', prefix .. id, 'lgates')
  local tag = tag_of(prefix)
  for gate in string.gmatch(gates, '%S+') do
    redis.call('SREM', tag .. 'lheld:' .. gate, id)
    gate_fill(prefix, gate, now)
  end
end

local function gate_regate(prefix, now)
  -- after a declaration or an override: each job type's active gates ('<tag>:lactive') are
  -- those of its candidates ('<tag>:lcand' type -> 'type:<t> ds:<name>') with a declared or a
  -- live overridden limit, and every candidate gate's line is filled to its slots (a raised or
  -- removed limit starts waiting jobs at once). Returns how many jobs it started.
  local tag = tag_of(prefix)
  local cand = redis.call('HGETALL', tag .. 'lcand')
  local seen, moved = {}, 0
  for i = 1, #cand, 2 do
    local active = {}
    for gate in string.gmatch(cand[i + 1], '%S+') do
      local n, rn = gate_limits(tag, gate, now)
      if n or rn then active[#active + 1] = gate end
      seen[gate] = true
    end
    if #active > 0 then
      redis.call('HSET', tag .. 'lactive', cand[i], table.concat(active, ' '))
    else
      redis.call('HDEL', tag .. 'lactive', cand[i])
    end
  end
  for gate in pairs(seen) do
    local before = redis.call('LLEN', tag .. 'lline:' .. gate)
    gate_fill(prefix, gate, now)
    moved = moved + before - redis.call('LLEN', tag .. 'lline:' .. gate)
  end
  return moved
end

local function group_override(job_prefix, g, now)
  -- an operator's override of group ``g`` while it lasts (HASH '<tag>:glimits', group ->
  -- '<slots>|<until ms>|<n>/<window ms>', either limit '' when not overridden, until 0: until
  -- cleared; group_limit.lua): its slots (or nil) and its rate's n and window (or nil)
  local raw = redis.call('HGET', tag_of(job_prefix) .. 'glimits', g)
  if not raw then return nil, nil, nil end
  local n, untl, rate = string.match(raw, '^(%d*)|(%d+)|?(.*)$')
  if not untl or (untl ~= '0' and tonumber(untl) <= now) then return nil, nil, nil end
  local rn, rw = string.match(rate, '^(%d+)/(%d+)$')
  rn, rw = tonumber(rn), tonumber(rw)
  if not rn or rn < 1 or rw < 1 then rn, rw = nil, nil end
  return tonumber(n), rn, rw
end

local function group_limit(job_prefix, id, g, now)
  -- the group's slots: an operator's override while it lasts, else the job's own 'gconc',
  -- else GROUP_WINDOW
  local n = group_override(job_prefix, g, now)
  if n then return n end
  return num_field(job_prefix .. id, 'gconc', GROUP_WINDOW)
end

-- Group rates (group_rate="10/s"): a job of a group with a rate (its field 'grate',
-- '<n>/<window ms>') is given its start when it takes a slot: at most n of the group's jobs
-- start in any window of that length (a sliding window, not a bucket that refills). ZSET
-- '<tag>:grate:<group>' (keys.QueueKeys.group_rate) holds the group's starts of the last window
-- and those ahead (member: the job's id, score: its start; the key expires a window after the
-- newest); the next start is the n-th newest + the window, or now. A job's start is when it is
-- made ready; when it ends (group_leave) its score becomes the time it was reserved if that was
-- later (no worker free, or the promotion pass's lag), so the next starts count from the real
-- ones. A start later than now makes that one job wait in 'scheduled' for it (its visible_at;
-- field 'rate_due' says why), holding its slot, promoted by promote_due.lua like any delayed
-- job. While such a start is ahead the group is at its rate (rate_blocked): its next jobs wait
-- in the group's line, and the scheduled job's end gives the next starts. So no job is
-- delivered early, snoozed or charged an attempt for its group's rate, no start is given more
-- than a window ahead, and the ready list holds only other groups' jobs meanwhile. A retried
-- or swept job keeps its slot and its start (no second one is taken). An operator's override
-- of the group's rate (group_override) replaces its jobs' own, or gives a group a rate its
-- jobs do not name; the start it gave ahead is given again under the new rate (rate_regive).
local function rate_of(job_prefix, id, g, now)
  -- the rate of ``id``'s group ``g``: an operator's override of it while it lasts (a group
  -- whose jobs name no rate can be given one), else the job's own 'grate'; nil: none
  local _, on, ow = group_override(job_prefix, g, now)
  if on then return on, ow end
  local raw = redis.call('HGET', job_prefix .. id, 'grate')
  if not raw or raw == '' then return nil, nil end
  local n, w = string.match(raw, '^(%d+)/(%d+)$')
  n, w = tonumber(n), tonumber(w)
  if not n or n < 1 or w < 1 then return nil, nil end
  return n, w
end

local function rate_blocked(job_prefix, id, g, now)
  -- whether ``id`` (of group ``g``) must wait in the line: its group has a rate, has given a
  -- start that is still ahead, and one of its jobs holds a slot (whose end fills the line
  -- again: with none, e.g. the scheduled one purged, the job takes its slot and a start)
  if not rate_of(job_prefix, id, g, now) then return false end
  local tag = tag_of(job_prefix)
  local newest = redis.call('ZREVRANGE', tag .. 'grate:' .. g, 0, 0, 'WITHSCORES')
  return newest[2] ~= nil and tonumber(newest[2]) > now and
         redis.call('SCARD', tag .. 'gheld:' .. g) > 0
end

local function rate_start(job_prefix, id, g, now)
  local n, w = rate_of(job_prefix, id, g, now)
  if not n then return end
  local key = job_prefix .. id
  local starts = tag_of(job_prefix) .. 'grate:' .. g
  redis.call('ZREMRANGEBYSCORE', starts, '-inf', now - w)  -- (they limit no start now)
  local at = now
  local nth = redis.call('ZREVRANGE', starts, n - 1, n - 1, 'WITHSCORES')
  if nth[2] and tonumber(nth[2]) + w > now then at = tonumber(nth[2]) + w end
  redis.call('ZADD', starts, at, id)
  if redis.call('PTTL', starts) < at - now + w then
    redis.call('PEXPIRE', starts, at - now + w)  -- (relative: now is the caller's clock)
  end
  if at > now and at > num_field(key, 'visible_at', 0) then
    redis.call('HSET', key, 'visible_at', at, 'rate_due', at)
  end
end

local function rate_started(job_prefix, id, g, now)
  -- a job of a group with a rate left its slot: its start becomes the time it was reserved,
  -- when that was later than the start it was given
  local _, w = rate_of(job_prefix, id, g, now)
  if not w then return end
  local began = tonumber(redis.call('HGET', job_prefix .. id, 'reserved_at') or '')
  if not began or began + w <= now then return end
  local starts = tag_of(job_prefix) .. 'grate:' .. g
  local given = tonumber(redis.call('ZSCORE', starts, id) or '')
  if given and given >= began then return end
  redis.call('ZADD', starts, began, id)
  if redis.call('PTTL', starts) < began - now + w then
    redis.call('PEXPIRE', starts, began - now + w)
  end
end

local function rate_regive(job_prefix, g, now)
  -- after an operator changed ``g``'s rate: the starts it gave ahead (its jobs scheduled for
  -- them: one at a time, at most 100 here) are given again under the rate now, sooner or later
  -- (a job whose new start is now is made ready)
  local tag = tag_of(job_prefix)
  local starts = tag .. 'grate:' .. g
  local ahead = redis.call('ZRANGEBYSCORE', starts, '(' .. now, '+inf', 'LIMIT', 0, 100)
  if #ahead == 0 then return end
  redis.call('ZREM', starts, unpack(ahead))
  for _, id in ipairs(ahead) do
    local key = job_prefix .. id
    local f = redis.call('HMGET', key, 'state', 'rate_due', 'visible_at')
    if f[1] == 'scheduled' and f[2] and f[2] == f[3] then
      redis.call('HSET', key, 'visible_at', now)  -- (the old start set it: it goes)
      redis.call('HDEL', key, 'rate_due')
      rate_start(job_prefix, id, g, now)
      local at = num_field(key, 'visible_at', now)
      if at > now then
        redis.call('ZADD', tag .. 'scheduled', at, id)
      else
        redis.call('ZREM', tag .. 'scheduled', id)
        place(job_prefix, id, now, true)
      end
    end
  end
end

local function slot_take(job_prefix, g, id, now)
  local tag = tag_of(job_prefix)
  if redis.call('SADD', tag .. 'gheld:' .. g, id) == 1 then
    redis.call('ZINCRBY', tag .. 'gslots', 1, g)
    rate_start(job_prefix, id, g, now)
  end
end

local function group_fill(job_prefix, g, now, limit)
  -- while ``g`` has a free slot (and is not at its rate: rate_blocked), its oldest waiting
  -- job takes it and is placed (at most 100 per call: a raised limit fills over the next calls)
  local tag = tag_of(job_prefix)
  local held, line = tag .. 'gheld:' .. g, tag .. 'gline:' .. g
  for _ = 1, 100 do
    if redis.call('SCARD', held) >= limit then return end
    local oldest = redis.call('LINDEX', line, -1)
    if oldest and rate_blocked(job_prefix, oldest, g, now) then return end
    local nxt = pop_waiting(job_prefix, line, g)
    if not nxt then return end
    slot_take(job_prefix, g, nxt, now)
    place(job_prefix, nxt, now, false)
    tl_add_json(tl_key(job_prefix, nxt), now, 'turn', '""', '{"group":' .. cjson.encode(g) .. '}')
  end
end

local function group_over(job_prefix, id, now, back)
  -- at reserve, while a group of the queue has an operator's limit: true when ``id``'s group
  -- holds more slots than its override allows now (it was lowered), so ``id`` gives its slot
  -- back and waits, untouched, at the front of the group's line (``back``: group -> ids, in
  -- the order reserve met them; group_over_end puts them there). The start its group's rate
  -- gave it is dropped: it did not start.
  local g = redis.pcall('HGET', job_prefix .. id, 'fgroup')
  if type(g) ~= 'string' or g == '' then return false end
  local n = group_override(job_prefix, g, now)
  local tag = tag_of(job_prefix)
  local held = tag .. 'gheld:' .. g
  if not n or redis.call('SCARD', held) <= n then return false end
  if redis.call('SREM', held, id) == 0 then return false end
  if tonumber(redis.call('ZINCRBY', tag .. 'gslots', -1, g)) <= 0 then
    redis.call('ZREM', tag .. 'gslots', g)
  end
  redis.call('ZREM', tag .. 'grate:' .. g, id)
  redis.call('ZADD', tag .. 'waiting', now, id)
  redis.call('HSET', job_prefix .. id, 'state', 'waiting', 'waits_on', 'group')
  redis.call('ZINCRBY', tag .. 'gwait', 1, g)
  back[g] = back[g] or {}
  table.insert(back[g], 1, id)  -- newest met first: the first met is RPUSHed last
  return true
end

local function group_over_end(job_prefix, back)
  for g, ids in pairs(back) do
    redis.call('RPUSH', tag_of(job_prefix) .. 'gline:' .. g, unpack(ids))
  end
end

local HEAD_STATES = {ready = true, scheduled = true, inflight = true}

local function group_join(job_prefix, id, g, now)
  -- ``id`` asks group ``g`` for a slot: true when it has one (the caller places it); false
  -- when it now waits at the end of the group's line. A slot whose job is gone (removed by
  -- hand) is found and freed, one per call.
  local tag = tag_of(job_prefix)
  local held, line = tag .. 'gheld:' .. g, tag .. 'gline:' .. g
  if redis.call('SISMEMBER', held, id) == 1 then return true end
  local limit = group_limit(job_prefix, id, g, now)
  if redis.call('SCARD', held) >= limit then
    local one = redis.call('SRANDMEMBER', held)
    local st = redis.call('HMGET', job_prefix .. (one or ''), 'state', 'waits_on')
    if one and not HEAD_STATES[st[1] or ''] and not (st[1] == 'waiting' and st[2] == 'limit') then
      redis.call('SREM', held, one)
      redis.call('ZINCRBY', tag .. 'gslots', -1, g)
    end
  end
  if redis.call('LLEN', line) > 0 then group_fill(job_prefix, g, now, limit) end
  if redis.call('SCARD', held) < limit and redis.call('LLEN', line) == 0
      and not rate_blocked(job_prefix, id, g, now) then
    slot_take(job_prefix, g, id, now)
    return true
  end
  wait_in(job_prefix, line, id, now, 'group', g)
  return false
end

local function group_leave(job_prefix, id, g, now)
  -- ``id`` left group ``g``'s slot (done, dead, gone, or waiting on its key again): the
  -- group's oldest waiting job takes it
  if not g or g == '' then return end
  local tag = tag_of(job_prefix)
  if redis.call('SREM', tag .. 'gheld:' .. g, id) == 0 then return end
  if tonumber(redis.call('ZINCRBY', tag .. 'gslots', -1, g)) <= 0 then
    redis.call('ZREM', tag .. 'gslots', g)
  end
  rate_started(job_prefix, id, g, now)
  group_fill(job_prefix, g, now, group_limit(job_prefix, id, g, now))
end

local function turn_pass(job_prefix, id, lk, now)
  -- ``id`` ended its turn on ``lk`` (nothing happens when it is not the head): the oldest
  -- waiting job becomes the head, with a 'turn' event, and is placed (or, with a group, asks
  -- it for a slot); an empty line frees the key. Returns the new head's id, or nil.
  if not lk or lk == '' then return nil end
  local tag = tag_of(job_prefix)
  local turns = tag .. 'kturn'
  if redis.call('HGET', turns, lk) ~= id then return nil end
  local nxt = pop_waiting(job_prefix, tag .. 'kline:' .. lk, nil)
  if not nxt then
    redis.call('HDEL', turns, lk)
    return nil
  end
  redis.call('HSET', turns, lk, nxt)
  tl_add_json(tl_key(job_prefix, nxt), now, 'turn', '""',
              '{"lock_key":' .. cjson.encode(lk) .. ',"after":' .. cjson.encode(id) .. '}')
  local g = redis.call('HGET', job_prefix .. nxt, 'fgroup') or ''
  if g == '' then
    place(job_prefix, nxt, now, true)  -- the oldest end: it waited its turn already
  elseif group_join(job_prefix, nxt, g, now) then
    place(job_prefix, nxt, now, false)
  end
  return nxt
end

local function is_head(job_prefix, id)
  -- whether the job a key names as its head still is one: ready, scheduled, in flight, or
  -- waiting for its group's slot
  local f = redis.call('HMGET', job_prefix .. id, 'state', 'waits_on')
  return HEAD_STATES[f[1] or ''] or (f[1] == 'waiting' and (f[2] == 'group' or f[2] == 'limit'))
end

local function turn_join(job_prefix, id, lk, now)
  -- ``id`` (lock key ``lk``, not '') joins its key: true when it holds the turn (the caller
  -- places it, or asks its group); false when it now waits at the end of the key's line. A
  -- head that is no head any more (its record lost or removed by hand) is passed over first,
  -- so a key is never stuck behind it.
  local tag = tag_of(job_prefix)
  local turns = tag .. 'kturn'
  local head = redis.call('HGET', turns, lk)
  if head and head ~= id and not is_head(job_prefix, head) then
    turn_pass(job_prefix, head, lk, now)
    head = redis.call('HGET', turns, lk)
  end
  if not head or head == id then
    redis.call('HSET', turns, lk, id)
    return true
  end
  wait_in(job_prefix, tag .. 'kline:' .. lk, id, now, 'lock', nil)
  return false
end

local function admit(job_prefix, id, lk, g, now)
  -- a job arriving (enqueue, replay): true when it may be placed now; false: it waits
  -- (behind its key's head, or for its group's slot)
  if lk ~= '' and not turn_join(job_prefix, id, lk, now) then return false end
  if g ~= '' and not group_join(job_prefix, id, g, now) then return false end
  return true
end

local function turn_end(job_key, id, now, row)
  -- the job at ``job_key`` ended (dead or gone): its group slot and its key's turn, if it
  -- held them, pass on (``row``: its fields already read, as bury_failed has them)
  local f = row and {row.lock_key, row.fgroup, row.lgates}
            or redis.call('HMGET', job_key, 'lock_key', 'fgroup', 'lgates')
  local prefix = prefix_of(job_key, id)
  gate_leave(prefix, id, now, f[3])
  group_leave(prefix, id, f[2], now)
  if f[1] and f[1] ~= '' then turn_pass(prefix, id, f[1], now) end
end

-- == Redrives that watch what they replayed (issue 25 item 3) ==================================
-- A job replayed by a paced bulk replay carries the task's id (field 'rtask', set by replay.lua;
-- '' for any other replay). When such a job fails again, the task's counters in the queue's
-- HASH '<tag>:rwatch' (keys.QueueKeys.replay_watch) are bumped: '<task>|failed' once per job
-- (its first failure since the replay: a retry at attempt 1, or a death with no retry before),
-- '<task>|died' per death, '<task>|same' when it died in the error group it was replayed from,
-- '<task>|last' the group it died in. antre/control/redrive.py reads them and pauses the task.
-- A job without the field costs nothing more (its value comes with the HMGET bury_job does).
local function redrive_failed(job_key, id, task, died, old_group, group, attempt)
  local w = tag_of(prefix_of(job_key, id)) .. 'rwatch'
  if attempt <= 1 then redis.call('HINCRBY', w, task .. '|failed', 1) end
  if not died then return end
  redis.call('HINCRBY', w, task .. '|died', 1)
  if old_group == group then redis.call('HINCRBY', w, task .. '|same', 1) end
  redis.call('HSET', w, task .. '|last', group)
end

-- == Flows (issue 26): the section is antre/engine/lua/_flows.lua, read in here by scripts.py
-- #include _flows.lua

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
  w[n + 1], w[n + 2], w[n + 3], w[n + 4] = 'state', 'dead', 'reason', reason
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
  -- a member of a flow: its policy decides (issue 26)
  flow_dead(job_key, id, now, reason, row and (row.flow or '') or nil)
  return group
end

-- == Cancelled jobs (issue 25) ==================================================================
-- An operator's cancel request (cancel_request.lua) is kept on the job (field 'cancel', JSON
-- {by, to, reason, at}) until the job ends. A cancelled job is never run again nor handed back:
-- whichever script would put it back where a worker can take it (a hand-back, retry or snooze:
-- retry.lua; a lease expiry: sweep_expired.lua; a reserve of one put back before: reserve.lua)
-- ends it as cancelled instead (cancel_end), as cancel_finish.lua does for the worker.
local CANCEL_TL_KEEP_MS = 7 * 86400000  -- a discarded job's timeline stays (DISCARDED_TIMELINE_MS)

local function cancel_of(raw)
  -- the request held in a job's 'cancel' field (a table), or nil when there is none
  if type(raw) ~= 'string' or raw == '' then return nil end
  local ok, req = pcall(cjson.decode, raw)
  if not ok or type(req) ~= 'table' then req = {} end
  return req
end

local function cancel_end(job_key, id, now, req, actor, dlq, cancels, tl, reason, signature)
  -- ends the job at ``job_key`` (already taken out of inflight / ready) as the request ``req``
  -- asks: to the DLQ (dlq = {dead, stats, errgroups, dead-by-type prefix, dead-by-group
  -- prefix}) with ``reason`` ('cancelled by NAME: why' when nil), or discarded (the job gone,
  -- its timeline kept CANCEL_TL_KEEP_MS). A 'cancelled' event ends its timeline ``tl``.
  local by, why = tostring(req.by or '?'), tostring(req.reason or '')
  local to = req.to == 'discard' and 'discard' or 'dlq'
  reason = reason or ('cancelled by ' .. by .. (why ~= '' and (': ' .. why) or ''))
  signature = signature or ('cancelled: cancelled by ' .. by)
  tl_pending(job_key, tl, nil)  -- the last delivery's 'reserved' event first
  redis.call('HDEL', cancels, id)
  redis.call('HINCRBY', dlq[2], 'cancelled', 1)
  local detail = {by = by, reason = why, to = to, requested_at = tonumber(req.at) or 0,
                  delivery = num_field(job_key, 'deliveries', 0)}
  if to == 'discard' then
    tl_add(tl, now, 'cancelled', actor, detail)
    turn_end(job_key, id, now)  -- the next job waiting on its lock_key gets the turn
    flow_gone(job_key, id, now, reason, dlq[2])  -- (a member of a flow: gone for good)
    local df = redis.call('HMGET', job_key, 'idem_key', 'waiters')
    if df[1] then unindex_key(idem_index_key(prefix_of(job_key, id)), df[1], id) end
    result_wake(prefix_of(job_key, id), id, df[2])
    redis.call('DEL', job_key, jlog_key(prefix_of(job_key, id), id))
    redis.pcall('PEXPIRE', tl, CANCEL_TL_KEEP_MS)
    redis.call('HINCRBY', dlq[2], 'discarded', 1)
    return 'discarded'
  end
  redis.call('HDEL', job_key, 'cancel', 'rtask')  -- (an operator's cancel: no redrive failure)
  append_error(job_key, now, 'cancelled', reason, '')
  redis.call('HSET', job_key, 'deadline', 0)
  bury_job(job_key, id, now, reason, signature, dlq[1], dlq[2], dlq[3], dlq[4], dlq[5])
  detail.reason_text = reason
  tl_add(tl, now, 'cancelled', actor, detail)
  return 'cancelled'
end

-- == Completing jobs (ack.lua, one job; ack_many.lua, a worker's batch) =========================
-- A job reserved plain ("What reserve returns per job" below; the client says so, with the
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
  if f[1] ~= 'inflight' then return 'LOST:job is ' .. f[1] end
  if f[2] ~= epoch then return 'LOST:lease epoch is ' .. tostring(f[2]) .. ', not ' .. epoch end
  note = note_log(key, id, note)
  if not kept then
    tl_pending(key, tl, nil)
    if not actor or actor == '' then actor = f[5] or '' end
    local detail = '{"result":' .. cjson.encode(string.sub(result, 1, 500)) ..
                   ',"since_reserved_ms":' ..
                   string.format('%d', now - (num_of(f[6], now))) .. '}'  -- (%d: no float printf)
    tl_add_json(tl, now, kind, cjson.encode(actor), detail, note)
  end
  if kept and note and note ~= '' then
    redis.call('HSET', key, 'state', 'done', 'finished_at', ms_text(now), 'result', result,
               'dnote', note)
  else
    redis.call('HSET', key, 'state', 'done', 'finished_at', ms_text(now), 'result', result)
  end
  if f[3] then result_wake(prefix_of(key, id), id, f[3]) end
  if whole then
    unique_release_key(key, id, true, f[7])
    if f[11] then gate_leave(prefix_of(key, id), id, now, f[11]) end
    if f[9] and f[9] ~= '' then group_leave(prefix_of(key, id), id, f[9], now) end
    if f[8] and f[8] ~= '' then turn_pass(prefix_of(key, id), id, f[8], now) end
    if f[10] and f[10] ~= '' then flow_acked(key, id, now, result, f[10]) end  -- a flow's (issue 26)
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

-- == Records that are not job hashes (issue 24) ================================================
-- A script that walks several jobs deals with a broken record alone, before it writes anything
-- for it, and never leaves its id in no list:
-- * an id that is not ASCII (no client could decode it, so it cannot be a dead job the pages
--   list) goes to the queue's quarantine (keys.QueueKeys.quarantine: a LIST of JSON entries
--   {t, id (non-printable bytes as '?'), id_hex, why}, newest first, capped at QUARANTINE_CAP;
--   stats 'quarantined' counts them), and so does an id whose record is missing;
-- * a record that is not a hash (a string, list, set, zset, stream) becomes a dead job saying
--   so: the old value is replaced by a hash (type '(unknown)', its field 'corrupt' keeps a
--   printable preview of what was there) buried with the reason, in the DLQ like any other.
local QUARANTINE_CAP = 1000

local function bad_id(id)
  -- true for an id a client cannot decode: bytes outside ASCII
  return string.find(id, '[\128-\255]') ~= nil
end

local function printable(raw)
  local out = string.gsub(raw, '[^\32-\126]', '?')
  return out
end

local function quarantine(qkey, stats, now, id, why)
  local hex = string.gsub(id, '.', function(c) return string.format('%02x', string.byte(c)) end)
  redis.call('LPUSH', qkey, cjson.encode({t = now, id = printable(id), id_hex = hex, why = why}))
  redis.call('LTRIM', qkey, 0, QUARANTINE_CAP - 1)
  redis.call('HINCRBY', stats, 'quarantined', 1)
end

local function bury_not_hash(prefix, id, now, actor, dlq)
  -- the record of ``id`` is not a hash (already taken out of its list): a dead job that says
  -- so. dlq: {dead, stats, errgroups, dead-by-type prefix, dead-by-group prefix}
  local key = prefix .. id
  local rtype = redis.call('TYPE', key).ok
  local preview = rtype
  if rtype == 'string' then
    preview = 'string: ' .. printable(redis.call('GETRANGE', key, 0, 999))
  end
  local reason = 'job record is a ' .. rtype .. ', not a hash (found by ' .. actor ..
                 '); the job cannot run: its field corrupt shows what was stored'
  redis.call('DEL', key)
  redis.call('HSET', key, 'id', id, 'type', '(unknown)', 'corrupt', preview,
             'error_kind', 'corrupt', 'last_error', reason, 'deadline', 0)
  bury_job(key, id, now, reason, 'corrupt: job record is a ' .. rtype .. ', not a hash',
           dlq[1], dlq[2], dlq[3], dlq[4], dlq[5])
  tl_add(tl_key(prefix, id), now, 'buried', actor, {reason = reason, kind = 'corrupt'})
end

-- == Failing jobs (retry.lua, bury.lua: one job; fail_many.lua: a worker's batch, issue 29) =====
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
  a[7] = note_log(k[1], id, a[7])
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
    if lk ~= '' and redis.call('HGET', tag_of(prefix) .. 'kturn', lk) == id then
      turn_pass(prefix, id, lk, now)
      waits = not turn_join(prefix, id, lk, now)
      -- waiting on its key again: its group's slot goes to the group's next job
      if waits then group_leave(prefix, id, redis.call('HGET', k[1], 'fgroup'), now) end
    end
  end
  if waits then
    -- (state and line written by turn_join)
  elseif visible_at <= now then
    w[#w + 1], w[#w + 2] = 'state', 'ready'
    redis.call('HSET', k[1], unpack(w))
    redis.call('RPUSH', k[4], id)
  else
    w[#w + 1], w[#w + 2] = 'state', 'scheduled'
    redis.call('HSET', k[1], unpack(w))
    redis.call('ZADD', k[3], visible_at, id)
  end
  redis.call('HINCRBY', k[5], a[6], 1)
  return 'OK'
end

-- == A dead job's traceback, shared by its error group (issue 29) ==============================
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
    local key = tag_of(prefix_of(job_key, id)) .. 'errtb'
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
  a[9] = note_log(k[1], id, a[9])
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

-- == What reserve returns per job =================================================================
-- reserve.lua returns, for each job, the values of RESERVE_FIELDS in that order (the list is
-- antre/engine/envelope.py's RESERVE_FIELDS, written in here by scripts.py). reserve_layout
-- turns a field list into what reserve reads and writes per job: one read (HMGET) of PLAIN,
-- the fields every job has (envelope.PLAIN_FIELDS: what a standard enqueue stores besides
-- 'state'; the id is the one the job was popped by, not read), and the hash's field count
-- (HLEN). When the count is the fields found plus one (its state) the job has no other field:
-- none of the others is asked for. Such a plain job under the default layout (fast) gets its
-- first lease with constant values and a row of PLAIN_FIELDS, its id and reserved_at (the
-- client makes the lease's other values: envelope.from_row, and knows the job was reserved
-- plain: its ack skips the lookups of what a plain job cannot have, ack_job). Any other job
-- (one delivered before, with a lock key, a flow, a cancel request, a trace of its own, a
-- damaged counter, or written by another version) gets a second read (HMGET of EXTRA) and a
-- whole row (issue 29: a plain job's read asks for 6 names, not 22). The fields reserve writes
-- (WRITTEN) are not returned as read: the reply carries the values written. RESERVE_DEFAULT is
-- made when the library is loaded (with Redis Functions: once per server), not on every
-- reserve. Its tables are read only.
local RESERVE_FIELDS = {--[[RESERVE_FIELDS]]}
local PLAIN_FIELDS = {--[[PLAIN_FIELDS]]}

local function reserve_layout(names)
  -- (epoch and deliveries: read with EXTRA for the new lease's values; their places in the
  -- row are written ones, always returned)
  -- (id: the one the job was popped by; a hash's own is not read, and the standard enqueue
  -- stores none)
  local WRITTEN = {state = true, deadline = true, reserved_at = true, worker_id = true,
                   deliveries = true, epoch = true, id = true}
  local PLAIN = {}
  for i = 1, #PLAIN_FIELDS do PLAIN[PLAIN_FIELDS[i]] = true end
  local core, cpos, extra, epos, pos = {}, {}, {}, {}, {}
  local nret = #names
  for p = 1, nret do  -- (no ipairs: this runs when the library loads, where Redis Functions
    local name = names[p]  -- give the top level only the language itself)
    if PLAIN[name] then
      core[#core + 1] = name; cpos[#core] = p
    elseif not WRITTEN[name] then
      extra[#extra + 1] = name; epos[#extra] = p
    end
    pos[name] = pos[name] or p
  end
  local ncore, nextra = #core, #extra
  local function index_of(list, name)
    for i = 1, #list do if list[i] == name then return i end end
    list[#list + 1] = name  -- the script's own need, not returned
    return #list
  end
  -- every PLAIN field is read (else a plain job's unread field would count as another: no job
  -- would be plain)
  for i = 1, #PLAIN_FIELDS do index_of(core, PLAIN_FIELDS[i]) end
  -- identity: the first read is the row's first positions, nothing else (Queue's RESERVE_FIELDS)
  local identity = #core == ncore
  for i = 1, ncore do if cpos[i] ~= i then identity = false; break end end
  -- tail: EXTRA's asked fields are the row's last positions (Queue's RESERVE_FIELDS): a plain
  -- job's row stops before them
  local tail = nextra > 0
  for i = 1, nextra do if epos[i] ~= nret - nextra + i then tail = false; break end end
  local L = {core = core, cpos = cpos, extra = extra, epos = epos, nret = nret,
             ncore = ncore, nextra = nextra, identity = identity, tail = tail,
             p_id = pos.id, p_epoch = pos.epoch, p_deliveries = pos.deliveries,
             p_state = pos.state, p_deadline = pos.deadline, p_reserved_at = pos.reserved_at,
             p_worker = pos.worker_id}
  L.c_type, L.nread = index_of(core, 'type'), #core
  L.e_vt, L.e_ep, L.e_cancel = index_of(extra, 'vt_ms'), index_of(extra, 'epoch'), index_of(extra, 'cancel')
  L.e_dl = index_of(extra, 'deliveries')
  return L
end

local RESERVE_DEFAULT = reserve_layout(RESERVE_FIELDS)
-- fast: the layout's plain rows are PLAIN_FIELDS (the first read, as read), the id and
-- reserved_at (envelope.PLAIN_ROW)
RESERVE_DEFAULT.fast = RESERVE_DEFAULT.identity and #RESERVE_DEFAULT.core == #PLAIN_FIELDS
                       and RESERVE_DEFAULT.p_id == #PLAIN_FIELDS + 1
