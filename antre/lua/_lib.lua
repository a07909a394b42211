-- Shared helpers, prepended to every script by antre/scripts.py (not a script of its own).
-- Job hashes live at job_prefix .. id; all keys of a queue share one hash tag, so the keys a
-- script derives from a prefix are in the slot of the keys it declares.

local function num_field(key, field, default)
  -- a job hash field as an integer; garbage, NaN and infinities read as ``default`` (a script
  -- must never fail half-way: Redis does not roll back what it already changed)
  local v = tonumber(redis.call('HGET', key, field) or '')
  if not v or v ~= v or v == math.huge or v == -math.huge then return default end
  return math.floor(v)
end

local function bump(key, field, by)
  -- HINCRBY that survives a corrupted field
  local v = num_field(key, field, 0) + by
  redis.call('HSET', key, field, v)
  return v
end

local function wake(wake_key, n)
  -- tokens for idle workers blocked on the wake list (BLPOP): a few per call, capped
  if n > 0 then
    local tokens = {}
    for i = 1, math.min(n, 16) do tokens[i] = '1' end
    redis.call('LPUSH', wake_key, unpack(tokens))
    redis.call('LTRIM', wake_key, 0, 63)
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

local function unique_release(job_key, id, keep)
  -- a unique job ended: free its idempotency key's index entry (issue 13), or, when it
  -- completed (keep) with a unique_for window, hold the key as 'done:<id>' for that window
  local f = redis.call('HMGET', job_key, 'ukey', 'unique_ms')
  if not f[1] or f[1] == '' or redis.call('GET', f[1]) ~= id then return end
  local window = tonumber(f[2] or '') or 0
  if keep and window > 0 then
    redis.call('SET', f[1], 'done:' .. id, 'PX', math.floor(window))
  else
    redis.call('DEL', f[1])
  end
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
  return group
end
