-- sweep_expired: in-flight jobs past their deadline (their worker vanished) -> ready, or -> dead
-- when they were delivered max_deliveries times without finishing (a poison job).
-- KEYS[1] inflight   KEYS[2] ready   KEYS[3] dead   KEYS[4] stats   KEYS[5] errgroups
-- KEYS[6] quarantine (LIST; optional: without it a missing record is only dropped)
-- KEYS[7] cancels (HASH; optional): a job an operator cancelled is not put back; it ends as
-- cancelled (to the DLQ or discarded, as requested; outcome 'cancelled' / 'discarded')
-- ARGV[1] job_prefix   ARGV[2] now_ms   ARGV[3] max jobs   ARGV[4] dead-by-type prefix
-- ARGV[5] dead-by-group prefix
-- Each swept job gets a 'swept' event (and a 'buried' one when poison) by the 'sweeper'.
-- A record that is not a hash goes to the DLQ (outcome 'corrupt'), an id that is not ASCII or
-- whose record is missing to the quarantine (no outcome returned), each alone (_records.lua,
-- _guard.lua).
-- Then a sample of the waiting jobs, heads, group slots and held flow jobs is looked at:
-- what waits on a record that vanished moves on (mend_abandoned, _abandoned.lua).
-- Returns: {requeued count, buried count, id, outcome, id, outcome, ...}
local prefix, now = ARGV[1], tonumber(ARGV[2])
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - 1, 'LIMIT', 0, tonumber(ARGV[3]))
local requeued, buried = 0, 0
local out = {0, 0}
local dlq = {KEYS[3], KEYS[4], KEYS[5], ARGV[4], ARGV[5]}
for _, id in ipairs(ids) do
  local key = prefix .. id
  redis.call('ZREM', KEYS[1], id)
  local rtype = redis.call('TYPE', key).ok
  if bad_id(id) or rtype == 'none' then
    if KEYS[6] then
      quarantine(KEYS[6], KEYS[4], now, id, bad_id(id) and
                 'job id is not ASCII text (found by the sweeper)' or
                 'job record is missing (found by the sweeper)')
    end
  elseif rtype ~= 'hash' then
    bury_not_hash(prefix, id, now, 'sweeper', dlq)
    redis.call('HINCRBY', KEYS[4], 'corrupt', 1)
    buried = buried + 1
    out[#out + 1] = id
    out[#out + 1] = 'corrupt'
  elseif KEYS[7] and cancel_of(redis.call('HGET', key, 'cancel')) then
    local tl = tl_key(prefix, id)
    tl_pending(key, tl, nil)  -- the delivery's 'reserved' event first (_lib.lua)
    local w = redis.call('HGET', key, 'worker_id') or ''
    tl_add(tl, now, 'swept', 'sweeper', {worker = w, delivery = num_field(key, 'deliveries', 0),
                                         outcome = 'cancelled'})
    out[#out + 1] = id
    out[#out + 1] = cancel_end(key, id, now, cancel_of(redis.call('HGET', key, 'cancel')),
                               'sweeper', dlq, KEYS[7], tl, nil, nil)
    buried = buried + 1
  else
    gate_leave(prefix, id, now, nil)  -- its limit slots pass on
    local deliveries, maxd = num_field(key, 'deliveries', 0), num_field(key, 'max_deliveries', 10)
    local f = redis.call('HMGET', key, 'worker_id')
    local msg = 'lease expired on worker ' .. (f[1] or '?') .. ' (delivery ' .. deliveries .. ')'
    local tl = tl_key(prefix, id)
    tl_pending(key, tl, nil)  -- the delivery's 'reserved' event first (_lib.lua)
    append_error(key, now, 'lease_expired', msg, '')
    redis.call('HSET', key, 'deadline', 0)
    redis.call('HINCRBY', KEYS[4], 'expired', 1)
    tl_add(tl, now, 'swept', 'sweeper', {worker = f[1] or '', delivery = deliveries,
                                         outcome = deliveries >= maxd and S.dead or S.ready})
    if deliveries >= maxd then
      bury_poison(key, id, now, deliveries, maxd, tl, 'sweeper', KEYS[3], KEYS[4], KEYS[5],
                  ARGV[4], ARGV[5])
      buried = buried + 1
      out[#out + 1] = id
      out[#out + 1] = S.dead
    else
      redis.call('HSET', key, 'state', S.ready)
      redis.call('RPUSH', KEYS[2], id)
      requeued = requeued + 1
      out[#out + 1] = id
      out[#out + 1] = S.ready
    end
  end
end
out[1], out[2] = requeued, buried
mend_abandoned(prefix, now)  -- what waits on a vanished record moves on (_abandoned.lua)
return out
