-- Job timelines and the idempotency-key index.
-- Part of the scripts' shared library (_lib.lua lists the parts in order).

-- == Job timelines and the idempotency-key index ===================================
-- A job's timeline is a LIST '<tag>:tl:<id>' (keys.QueueKeys.timeline), oldest event first,
-- at most TL_CAP (see tl_elide); scripts given only the job prefix '<tag>:job:' derive it with tl_key (and
-- the index, keys.QueueKeys.idem_index '<tag>:idem', with idem_index_key). Every event is one
-- JSON object: {"t": ms, "k": kind, "a": actor, "d": {details}, "x": the caller's own JSON}.
-- A job hash that is deleted takes its timeline and its index entry with it (forget_job).
-- A failure's traceback keeps its last 2,000 characters here (the job's 'errors' keep 8,000).
local TL_CAP = 100

local function tl_key(job_prefix, id)
  return tag_of(job_prefix) .. K.timeline .. id
end

local function idem_index_key(job_prefix)
  return tag_of(job_prefix) .. K.idem_index
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

-- == A delivery's routine events, kept in the job's hash =====================
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
  redis.call('DEL', key, tl_key(job_prefix, id))
end
