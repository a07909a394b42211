-- Limit gates: a job type's or downstream's concurrency and rate, held at reserve.
-- Part of the scripts' shared library (_lib.lua lists the parts in order).

-- Limit gates: a job type's or downstream's concurrency and rate, held in the
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
  local raw = redis.call('HGET', tag .. K.gate_overrides, gate)
  if not raw then return nil, nil end
  local n, untl, rate = string.match(raw, '^(%d*)|(%d+)|(.*)$')
  if not untl or (untl ~= '0' and tonumber(untl) <= now) then return nil, nil end
  return tonumber(n), (rate ~= '' and rate or nil)
end

local function gate_limits(tag, gate, now)
  -- ``gate``'s slots (nil: no concurrency limit) and rate (n, window ms; nil: none) now
  local n, rate = gate_override(tag, gate, now)
  if not n then n = tonumber(redis.call('HGET', tag .. K.gate_slots, gate) or '') end
  rate = rate or redis.call('HGET', tag .. K.gate_rates, gate)
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
  local starts = tag .. K.gate_starts .. gate
  local given = tonumber(redis.call('ZSCORE', starts, id) or '')
  if given and given + rw > now then return given end
  redis.call('ZREMRANGEBYSCORE', starts, '-inf', now - rw)
  local nth = redis.call('ZREVRANGE', starts, rn - 1, rn - 1, 'WITHSCORES')
  if nth[2] and tonumber(nth[2]) + rw > now then return tonumber(nth[2]) + rw end
  return now
end

local function gate_start(tag, gate, id, at, now, rw)
  -- ``id`` takes its start ``at`` under ``gate``'s rate (the key expires a window after it)
  local starts = tag .. K.gate_starts .. gate
  redis.call('ZADD', starts, at, id)
  if redis.call('PTTL', starts) < at - now + rw then redis.call('PEXPIRE', starts, at - now + rw) end
end

local function gate_mend(prefix, held)
  -- frees one slot of ``held`` whose job is no longer in flight (removed by hand; 'ready':
  -- taken by this reserve call a moment ago)
  local one = redis.call('SRANDMEMBER', held)
  local st = one and redis.call('HGET', prefix .. one, 'state')
  if one and st ~= S.inflight and st ~= S.ready then
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
  local gates = redis.call('HGET', tag .. K.gate_active, t)
  if not gates then return nil end
  guard_gates(tag, gates, now)
  local take, rated, at, why = {}, {}, now, nil
  for gate in string.gmatch(gates, '%S+') do
    local n, rn, rw = gate_limits(tag, gate, now)
    if n then
      local held = tag .. K.gate_held .. gate
      if redis.call('SCARD', held) >= n then gate_mend(prefix, held) end
      if redis.call('SCARD', held) >= n then
        for g2 in string.gmatch(gates, '%S+') do redis.call('ZREM', tag .. K.gate_starts .. g2, id) end
        wait_in(prefix, tag .. K.gate_line .. gate, id, now, 'limit', nil)
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
    redis.call('HSET', prefix .. id, 'state', S.scheduled, 'visible_at', at, 'gate', why)
    redis.call('ZADD', tag .. K.scheduled, at, id)
    return 'rate'
  end
  if #take > 0 then
    for _, gate in ipairs(take) do redis.call('SADD', tag .. K.gate_held .. gate, id) end
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
  if n then free = math.min(100, n - redis.call('SCARD', tag .. K.gate_held .. gate)) end
  local moved = {}
  for _ = 1, free do
    local nxt = pop_waiting(prefix, tag .. K.gate_line .. gate, nil)
    if not nxt then break end
    redis.call('HDEL', prefix .. nxt, 'gate')
    redis.call('HSET', prefix .. nxt, 'state', S.ready)
    table.insert(moved, 1, nxt)  -- newest first: the oldest is RPUSHed last, reserved first
  end
  if #moved == 0 then return end
  redis.call('RPUSH', tag .. K.ready, unpack(moved))
  wake(tag .. K.wake, #moved)
end

local function gate_leave(prefix, id, now, gates)
  -- ``id`` left flight: its gates' slots (``gates``: its 'lgates', read by the caller or here)
  -- pass to the gates' waiting jobs
  gates = gates or redis.call('HGET', prefix .. id, 'lgates')
  if not gates or gates == '' then return end
  redis.call('HDEL', prefix .. id, 'lgates')
  local tag = tag_of(prefix)
  guard_gates(tag, gates, now)
  for gate in string.gmatch(gates, '%S+') do
    redis.call('SREM', tag .. K.gate_held .. gate, id)
    gate_fill(prefix, gate, now)
  end
end

local function gate_regate(prefix, now)
  -- after a declaration or an override: each job type's active gates ('<tag>:lactive') are
  -- those of its candidates ('<tag>:lcand' type -> 'type:<t> ds:<name>') with a declared or a
  -- live overridden limit, and every candidate gate's line is filled to its slots (a raised or
  -- removed limit starts waiting jobs at once). Returns how many jobs it started.
  local tag = tag_of(prefix)
  local cand = redis.call('HGETALL', tag .. K.gate_candidates)
  local seen, moved = {}, 0
  for i = 1, #cand, 2 do
    local active = {}
    for gate in string.gmatch(cand[i + 1], '%S+') do
      local n, rn = gate_limits(tag, gate, now)
      if n or rn then active[#active + 1] = gate end
      seen[gate] = true
    end
    if #active > 0 then
      redis.call('HSET', tag .. K.gate_active, cand[i], table.concat(active, ' '))
    else
      redis.call('HDEL', tag .. K.gate_active, cand[i])
    end
  end
  for gate in pairs(seen) do
    guard_gates(tag, gate, now)
    local before = redis.call('LLEN', tag .. K.gate_line .. gate)
    gate_fill(prefix, gate, now)
    moved = moved + before - redis.call('LLEN', tag .. K.gate_line .. gate)
  end
  return moved
end
