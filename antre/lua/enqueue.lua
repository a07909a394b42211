-- enqueue: store new jobs and make them ready, or scheduled when visible later.
-- KEYS[1] ready (LIST)   KEYS[2] scheduled (ZSET)   KEYS[3] stats (HASH)   KEYS[4] types (SET)
-- KEYS[5] wake (LIST): a token per ready job (at most 16 per call, 64 kept) wakes idle workers
-- ARGV[1] job_prefix   ARGV[2] now_ms   ARGV[3] JSON array of the n field names; the first
-- three are id, type, visible_at
-- ARGV[4 ..] one JSON array of n string values per job (one argument per job keeps the
-- client's packing cost low for big batches)
-- Each stored job is indexed by its idempotency key (field 'idem_key', keys.QueueKeys.idem_index:
-- the newest job of a key). A job enqueued with a delay gets an 'enqueued' event (delay_ms); the
-- others' is read from the hash (created_at, trace_id), so an immediate job costs no timeline.
-- Returns: array with 1 for each job stored, 0 for a job id that already existed (unchanged).
local prefix, now = ARGV[1], tonumber(ARGV[2])
local names = cjson.decode(ARGV[3])
local n = #names
local out = {}
local idem_at = 0
for i = 1, n do if names[i] == 'idem_key' then idem_at = i end end
local idem_index = idem_index_key(prefix)
local stored = 0
local readied = 0
for a = 4, #ARGV do
  local values = cjson.decode(ARGV[a])
  local id, jtype, visible_at = values[1], values[2], tonumber(values[3])
  local key = prefix .. id
  if redis.call('EXISTS', key) == 1 then
    out[#out + 1] = 0
  else
    local fields = {}
    for i = 1, n do
      fields[#fields + 1] = names[i]
      fields[#fields + 1] = values[i]
    end
    redis.call('HSET', key, unpack(fields))
    redis.call('SADD', KEYS[4], jtype)
    if idem_at > 0 then redis.call('HSET', idem_index, values[idem_at], id) end
    if visible_at > now then
      redis.call('HSET', key, 'state', 'scheduled')
      redis.call('ZADD', KEYS[2], visible_at, id)
      tl_add(tl_key(prefix, id), now, 'enqueued', 'producer', {delay_ms = visible_at - now})
    else
      redis.call('HSET', key, 'state', 'ready')
      redis.call('LPUSH', KEYS[1], id)
      readied = readied + 1
    end
    stored = stored + 1
    out[#out + 1] = 1
  end
end
if stored > 0 then redis.call('HINCRBY', KEYS[3], 'enqueued', stored) end
wake(KEYS[5], readied)
return out
