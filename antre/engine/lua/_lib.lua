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

local function lease_error(job_key, epoch)
  -- nil when the caller holds the lease (state inflight, same epoch); else a LOST:... string
  -- (a record that is not a hash is LOST too: the sweeper sends it to the DLQ)
  local st = redis.pcall('HMGET', job_key, 'state', 'epoch')
  if st.err then return 'LOST:job record is not a hash' end
  if not st[1] then return 'LOST:job does not exist' end
  if st[1] ~= 'inflight' then return 'LOST:job is ' .. st[1] end
  if st[2] ~= epoch then return 'LOST:lease epoch is ' .. tostring(st[2]) .. ', not ' .. epoch end
  return nil
end

local function append_error(job_key, now, kind, err, tb)
  -- keeps the last 20 attempts' errors on the job for the DLQ detail page
  local raw = redis.call('HGET', job_key, 'errors')
  local list = {}
  if raw and raw ~= '' then
    local ok, decoded = pcall(cjson.decode, raw)
    if ok and type(decoded) == 'table' then list = decoded end
  end
  local attempt = num_field(job_key, 'attempt', 0)
  local deliveries = num_field(job_key, 'deliveries', 0)
  list[#list + 1] = {at = now, kind = kind, error = err, traceback = string.sub(tb, 1, 8000),
                     attempt = attempt, delivery = deliveries,
                     worker = redis.call('HGET', job_key, 'worker_id') or ''}
  while #list > 20 do table.remove(list, 1) end
  local first = redis.call('HGET', job_key, 'first_failed_at')
  if not first or first == '' or first == '0' then
    redis.call('HSET', job_key, 'first_failed_at', now)
  end
  redis.call('HSET', job_key, 'errors', cjson.encode(list), 'last_error', err, 'error_kind', kind,
             'traceback', string.sub(tb, 1, 8000), 'last_failed_at', now)
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

local function bury_job(job_key, id, now, reason, signature, dead, stats, errgroups,
                        type_prefix, group_prefix)
  -- moves a job (already removed from its previous place) into the dead-letter indexes
  local jtype = redis.call('HGET', job_key, 'type') or ''
  if jtype == '' then jtype = '(unknown)' end
  local group = string.sub(redis.sha1hex(signature), 1, 12)
  redis.call('HSET', job_key, 'state', 'dead', 'reason', reason, 'finished_at', now, 'group', group)
  redis.call('ZADD', dead, now, id)
  redis.call('ZADD', type_prefix .. jtype, now, id)
  redis.call('ZADD', group_prefix .. group, now, id)
  local g = redis.call('HGET', errgroups, group)
  local ok, rec = false, nil
  if g then ok, rec = pcall(cjson.decode, g) end
  if not ok or type(rec) ~= 'table' then  -- new, or a damaged record: started again
    rec = {signature = signature, first = now, total = 0, job_type = jtype, sample = reason}
  end
  rec.total = (tonumber(rec.total) or 0) + 1
  rec.last = now
  redis.call('HSET', errgroups, group, cjson.encode(rec))
  redis.call('HINCRBY', stats, 'buried', 1)
  unique_release(job_key, id, false)
  return group
end

-- == Job timelines and the idempotency-key index (issue 11) ===================================
-- A job's timeline is a LIST '<tag>:tl:<id>' (keys.QueueKeys.timeline), oldest event first,
-- capped at TL_CAP; scripts given only the job prefix '<tag>:job:' derive it with tl_key (and
-- the index, keys.QueueKeys.idem_index '<tag>:idem', with idem_index_key). Every event is one
-- JSON object: {"t": ms, "k": kind, "a": actor, "d": {details}, "x": the caller's own JSON}.
-- A job hash that is deleted takes its timeline and its index entry with it (forget_job).
-- A failure's traceback keeps its last 2,000 characters here (the job's 'errors' keep 8,000).
local TL_CAP = 100

local function tl_key(job_prefix, id)
  return string.sub(job_prefix, 1, -5) .. 'tl:' .. id
end

local function idem_index_key(job_prefix)
  return string.sub(job_prefix, 1, -5) .. 'idem'
end

local ms_n, ms_s = nil, ''  -- the last time formatted: a call's events share their now
local function ms_text(now)
  -- ``now`` (ms) as digits, formatted once per call rather than per job
  if now ~= ms_n then ms_n, ms_s = now, string.format('%d', now) end
  return ms_s
end

local function tl_add_json(key, now, kind, actor_json, detail_json, extra)
  -- actor and details already JSON-encoded (the hot paths build them once, or by hand)
  local ev = '{"t":' .. ms_text(now) .. ',"k":"' .. kind .. '","a":' ..
             actor_json .. ',"d":' .. detail_json
  if extra and extra ~= '' then ev = ev .. ',"x":' .. extra end
  -- pcall: a timeline key of another type loses the event, never the job's move
  local n = redis.pcall('RPUSH', key, ev .. '}')
  if type(n) == 'number' and n > TL_CAP then redis.call('LTRIM', key, -TL_CAP, -1) end
end

local function tl_add(key, now, kind, actor, detail, extra)
  tl_add_json(key, now, kind, cjson.encode(actor or ''), cjson.encode(detail or {}), extra)
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

local function actor_of(job_key, given)
  -- the caller's actor (an operator, the sweeper), else the worker holding the job
  if given and given ~= '' then return given end
  return redis.call('HGET', job_key, 'worker_id') or ''
end

-- == Completing jobs (ack.lua, one job; ack_many.lua, a worker's batch) =========================
local function ack_job(key, tl, id, epoch, now, result, kind, note, actor)
  -- in-flight -> done for the holder of the lease: the job's hash and its timeline event, with
  -- one read (HMGET) and one write (HSET) of the hash. The caller moves the id from inflight
  -- to done and counts it. Returns nil and the job's end-to-end latency in ms (nil when its
  -- created_at is unusable), or a 'LOST:...' string with nothing changed. ``tl``: the job's
  -- timeline (nil: no event).
  local f = redis.pcall('HMGET', key, 'state', 'epoch', 'worker_id', 'reserved_at', 'ukey',
                        'created_at')
  if f.err then return 'LOST:job record is not a hash' end  -- (the sweeper buries it)
  if not f[1] then return 'LOST:job does not exist' end
  if f[1] ~= 'inflight' then return 'LOST:job is ' .. f[1] end
  if f[2] ~= epoch then return 'LOST:lease epoch is ' .. tostring(f[2]) .. ', not ' .. epoch end
  if tl then
    if not actor or actor == '' then actor = f[3] or '' end
    local detail = '{"result":' .. cjson.encode(string.sub(result, 1, 500)) ..
                   ',"since_reserved_ms":' .. cjson.encode(now - (tonumber(f[4]) or now)) .. '}'
    tl_add_json(tl, now, kind, cjson.encode(actor), detail, note)
  end
  redis.call('HSET', key, 'state', 'done', 'finished_at', ms_text(now), 'result', result)
  unique_release_key(key, id, true, f[5])
  local created = num_of(f[6], 0)
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
