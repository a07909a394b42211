-- Small helpers every other part uses: numbers read from Redis, counters, wake tokens,
-- a lease's check, a failure's entry, a unique job's key, what a standard enqueue leaves out,
-- the actor of a change, and a queue's tag from a job prefix.
-- Part of the scripts' shared library (_lib.lua lists the parts in order).

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
  if f[1] ~= S.inflight then return nil, 'LOST:job is ' .. f[1] end
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
  -- (envelope.py reads the entry, a job stored before keeps its field unread).
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
  -- a unique job ended: free its idempotency key's index entry, or, when it
  -- completed (keep) with a unique_for window, hold the key as 'done:<id>' for that window
  unique_release_key(job_key, id, keep, redis.call('HGET', job_key, 'ukey'))
end


local function tag_of(job_prefix)
  return string.sub(job_prefix, 1, -(#K.job + 1))  -- '<tag>:job:' -> '<tag>:'
end

local function prefix_of(job_key, id)
  return string.sub(job_key, 1, #job_key - #id)
end

local function at_defaults(headers, timeout_s, vt_ms, max_deliveries)
  -- true for JobSpec's defaults as envelope.encode_new writes them (no headers, a 30 s timeout
  -- and lease, 10 deliveries): enqueue.lua and enqueue_one.lua then store none of these fields
  -- (nor an empty lock key), and every reader reads an absent one as that default
  return headers == '{}' and timeout_s == '30.0' and vt_ms == '30000' and max_deliveries == '10'
end


local function actor_of(job_key, given, row)
  -- the caller's actor (an operator, the sweeper), else the worker holding the job (from
  -- ``row`` when the caller read the job's fields already: leased_row)
  if given and given ~= '' then return given end
  if row then return row.worker_id or '' end
  return redis.call('HGET', job_key, 'worker_id') or ''
end
