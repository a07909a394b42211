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
  local st = redis.call('HMGET', job_key, 'state', 'epoch')
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
  if not ukey or ukey == '' or redis.call('GET', ukey) ~= id then return end
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
  if redis.call('RPUSH', key, ev .. '}') > TL_CAP then redis.call('LTRIM', key, -TL_CAP, -1) end
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
  unindex_key(idem_index_key(job_prefix), redis.call('HGET', key, 'idem_key'), id)
  redis.call('DEL', key, tl_key(job_prefix, id))
end

local function actor_of(job_key, given)
  -- the caller's actor (an operator, the sweeper), else the worker holding the job
  if given and given ~= '' then return given end
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

local function turn_pass(job_prefix, id, lk, now)
  -- ``id`` ended its turn on ``lk`` (nothing happens when it is not the head): the oldest
  -- waiting job becomes the head, with a 'turn' event; an empty line frees the key.
  -- Returns the new head's id, or nil.
  if not lk or lk == '' then return nil end
  local tag = tag_of(job_prefix)
  local turns = tag .. 'kturn'
  if redis.call('HGET', turns, lk) ~= id then return nil end
  local line, waiting = tag .. 'kline:' .. lk, tag .. 'waiting'
  while true do
    local nxt = redis.call('RPOP', line)
    if not nxt then
      redis.call('HDEL', turns, lk)
      return nil
    end
    if redis.call('ZREM', waiting, nxt) == 1 then
      local key = job_prefix .. nxt
      redis.call('HSET', turns, lk, nxt)
      local visible = num_field(key, 'visible_at', 0)
      if visible > now then
        redis.call('HSET', key, 'state', 'scheduled')
        redis.call('ZADD', tag .. 'scheduled', visible, nxt)
      else
        redis.call('HSET', key, 'state', 'ready')
        redis.call('RPUSH', tag .. 'ready', nxt)  -- the oldest end: it waited its turn already
        wake(tag .. 'wake', 1)
      end
      tl_add_json(tl_key(job_prefix, nxt), now, 'turn', '""',
                  '{"lock_key":' .. cjson.encode(lk) .. ',"after":' .. cjson.encode(id) .. '}')
      return nxt
    end
  end
end

local HEAD_STATES = {ready = true, scheduled = true, inflight = true}

local function turn_join(job_prefix, id, lk, now)
  -- ``id`` (lock key ``lk``, not '') joins its key: true when it holds the turn (the caller
  -- places it as usual); false when it now waits at the end of the line (the caller sets its
  -- state to 'waiting'). A head that is no job in a head's state any more (its record lost or
  -- removed by hand) is passed over first, so a key is never stuck behind it.
  local tag = tag_of(job_prefix)
  local turns = tag .. 'kturn'
  local head = redis.call('HGET', turns, lk)
  if head and head ~= id and not HEAD_STATES[redis.call('HGET', job_prefix .. head, 'state') or ''] then
    turn_pass(job_prefix, head, lk, now)
    head = redis.call('HGET', turns, lk)
  end
  if not head or head == id then
    redis.call('HSET', turns, lk, id)
    return true
  end
  redis.call('LPUSH', tag .. 'kline:' .. lk, id)
  redis.call('ZADD', tag .. 'waiting', now, id)
  return false
end

local function turn_end(job_key, id, now)
  -- the job at ``job_key`` ended (dead or gone): its turn, if it held one, passes
  local lk = redis.call('HGET', job_key, 'lock_key')
  if lk and lk ~= '' then turn_pass(prefix_of(job_key, id), id, lk, now) end
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
  local rec
  if g then rec = cjson.decode(g) else
    rec = {signature = signature, first = now, total = 0, job_type = jtype, sample = reason}
  end
  rec.total = rec.total + 1
  rec.last = now
  redis.call('HSET', errgroups, group, cjson.encode(rec))
  redis.call('HINCRBY', stats, 'buried', 1)
  unique_release(job_key, id, false)
  turn_end(job_key, id, now)
  return group
end

-- == Completing jobs (ack.lua, one job; ack_many.lua, a worker's batch) =========================
local function ack_job(key, tl, id, epoch, now, result, kind, note, actor)
  -- in-flight -> done for the holder of the lease: the job's hash and its timeline event, with
  -- one read (HMGET) and one write (HSET) of the hash. The caller moves the id from inflight
  -- to done and counts it. Returns nil and the job's end-to-end latency in ms (nil when its
  -- created_at is unusable), or a 'LOST:...' string with nothing changed. ``tl``: the job's
  -- timeline (nil: no event). A job with a lock_key passes its key's turn (turn_pass).
  local f = redis.call('HMGET', key, 'state', 'epoch', 'worker_id', 'reserved_at', 'ukey',
                       'created_at', 'lock_key')
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
  if f[7] and f[7] ~= '' then turn_pass(prefix_of(key, id), id, f[7], now) end
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
