-- Abandoned records: what waits on a job whose record vanished, moved on by the sweep.
-- Part of the scripts' shared library (_lib.lua lists the parts in order).

-- A job's record that vanished (deleted by hand, lost in a failover, trimmed) leaves what
-- waited on it waiting for ever: the jobs behind a lock key's head, a group's line behind a
-- slot it held, a flow's jobs held for it as a parent. Each sweep (sweep_expired.lua) looks at
-- a sample of each (mend_abandoned) and moves it on, with a quarantine entry saying what it
-- found ({t, record: 'head' / 'slot' / 'member', id, why, abandoned: true}) and counted in
-- stats ('<record>_vanished', and every one in 'abandoned': the alert abandoned_records):
-- * a head whose record is gone (or that is no head any more) passes its turn;
-- * a group's slot held by an id whose record is gone (or that holds none any more) is freed,
--   and so is a gate's held by one not in flight (each lets its line move);
-- * a flow's parent whose record is gone before it settled settles as failed, as its flow's
--   policy says for a dead member gone for good: 'ignore' / 'batch' go on without it (its
--   dependents are released), 'fail' / 'wait' give the flow up (flow_give_up).
local ABANDONED_SAMPLE = 10
local VANISHED = 'its record is gone'

local function abandoned(tag, now, what, id, why)
  local qkey = tag .. K.quarantine
  redis.call('LPUSH', qkey, cjson.encode({t = now, record = what, id = printable(id), why = why,
                                          abandoned = true}))
  redis.call('LTRIM', qkey, 0, QUARANTINE_CAP - 1)
  redis.call('HINCRBY', tag .. K.stats, what .. '_vanished', 1)
  redis.call('HINCRBY', tag .. K.stats, 'abandoned', 1)
end

local function flow_vanished(prefix, fk, fid, pid, now, stats)
  -- flow ``fid``'s member ``pid`` vanished before it settled
  local f = redis.call('HMGET', fk, 'state', 'policy', 'given_up_at')
  if not f[1] or f[1] == FS.cancelled then return end
  local reason = 'vanished: ' .. VANISHED
  if f[2] == 'ignore' or f[2] == 'batch' or (f[3] and f[3] ~= '') then
    if flow_settle_failed(fk, pid, reason) then
      redis.call('HINCRBY', fk, 'failed', 1)
      -- its dependents (its record, with their list, is gone): the flow's held jobs naming it
      for _, jid in ipairs(redis.call('LRANGE', fk .. K.flow_jobs, 0, 999)) do
        local j = redis.pcall('HMGET', prefix .. jid, 'state', 'fpar')
        if not j.err and j[1] == S.held and j[2] then
          local ok, parents = pcall(cjson.decode, j[2])
          if ok and type(parents) == 'table' then
            for _, p in ipairs(parents) do
              if tostring(p) == pid and
                  tonumber(redis.call('HINCRBY', prefix .. jid, 'fdeps', -1)) <= 0 then
                flow_place(prefix, jid, now, pid)
              end
            end
          end
        end
      end
    end
    flow_check(prefix, fk, fid, now)
  else
    if redis.call('SADD', fk .. K.flow_failed, pid) == 1 then
      redis.call('HINCRBY', fk, 'failed', 1)
    end
    flow_give_up(prefix, fk, fid, pid, now, reason, stats)
  end
end

local function mend_abandoned(prefix, now)
  -- the sweep's pass over a sample of heads, group slots and held flow jobs (see above);
  -- returns how many it moved on
  local tag, stats, n = tag_of(prefix), tag_of(prefix) .. K.stats, 0
  n = n + waiting_mend(prefix, now)
  local turns = tag .. K.turns
  if guard(tag, turns, R.turns, now) then
    local found = redis.call('HRANDFIELD', turns, ABANDONED_SAMPLE, 'WITHVALUES')
    for i = 1, #found, 2 do
      local lk, head = found[i], found[i + 1]
      if not is_head(prefix, head) then
        abandoned(tag, now, 'head', head, 'the head of lock key ' .. printable(lk) ..
                  ' is gone (' .. VANISHED .. '): its turn passed')
        turn_pass(prefix, head, lk, now)
        n = n + 1
      end
    end
  end
  if guard(tag, tag .. K.group_slots, R.group_slots, now) then
    for _, g in ipairs(redis.call('ZRANDMEMBER', tag .. K.group_slots, ABANDONED_SAMPLE)) do
      local held = tag .. K.group_held .. g
      if guard_group(tag, g, now) then  -- (its slots removed: the fill below retakes them)
        for _, one in ipairs(redis.call('SRANDMEMBER', held, 3)) do
          local st = redis.pcall('HMGET', prefix .. one, 'state', 'waits_on')
          if st.err or not (HEAD_STATES[st[1] or ''] or (st[1] == S.waiting and st[2] == 'limit')) then
            abandoned(tag, now, 'slot', one, 'a slot of group ' .. printable(g) ..
                      ' was held by a job that holds none (' .. VANISHED .. '): freed')
            group_leave(prefix, one, g, now)
            n = n + 1
          end
        end
      end
      -- slots lost with their record (removed, or the set deleted): the line takes them
      local line = tag .. K.group_line .. g
      local oldest = redis.call('LINDEX', line, -1)
      if oldest then group_fill(prefix, g, now, group_limit(prefix, oldest, g, now)) end
    end
  end
  local active = tag .. K.gate_active
  if guard(tag, active, R.gate_active, now) then
    local gates = {}
    for _, v in ipairs(redis.call('HRANDFIELD', active, ABANDONED_SAMPLE, 'WITHVALUES')) do
      for gate in string.gmatch(v, '%S+') do gates[gate] = true end
    end
    for gate in pairs(gates) do
      guard_gates(tag, gate, now)
      local held = tag .. K.gate_held .. gate
      for _, one in ipairs(redis.call('SRANDMEMBER', held, 3)) do
        local st = redis.pcall('HGET', prefix .. one, 'state')
        if st ~= S.inflight then
          abandoned(tag, now, 'gate_slot', one, 'a slot of gate ' .. printable(gate) ..
                    ' was held by a job not in flight (' .. VANISHED .. '): freed')
          redis.call('SREM', held, one)
          n = n + 1
        end
      end
      gate_fill(prefix, gate, now)
    end
  end
  for _, jid in ipairs(redis.call('ZRANDMEMBER', tag .. K.held, ABANDONED_SAMPLE)) do
    local j = redis.pcall('HMGET', prefix .. jid, 'state', 'flow', 'fpar')
    if not j.err and j[1] == S.held and j[2] and j[2] ~= '' and j[3] then
      local ok, parents = pcall(cjson.decode, j[3])
      local fk = flow_key(prefix, j[2])
      if ok and type(parents) == 'table' and guard_flow(tag, fk, now) then
        for _, p in ipairs(parents) do
          local pid = tostring(p)
          if redis.call('EXISTS', prefix .. pid) == 0 and
              redis.call('HEXISTS', fk .. K.flow_results, pid) == 0 then
            abandoned(tag, now, 'member', pid, 'a member of flow ' .. printable(j[2]) ..
                      ' is gone before it settled (' .. VANISHED .. '): settled as failed')
            flow_vanished(prefix, fk, j[2], pid, now, stats)
            n = n + 1
          end
        end
      end
    end
  end
  return n
end
