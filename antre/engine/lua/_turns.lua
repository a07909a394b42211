-- Per-key turns: jobs of one queue sharing a lock_key run one at a time, in order.
-- Part of the scripts' shared library (_lib.lua lists the parts in order).

-- Jobs of one queue that share a lock_key run one at a time, in the order they joined. The
-- key's head, whose turn it is (HASH '<tag>:kturn' lock_key -> id, keys.QueueKeys.turns), is a
-- job like any other: ready (or parked), scheduled or in flight. The others wait in the key's
-- line (LIST '<tag>:kline:<lock_key>', LPUSH newest, RPOP oldest) in state 'waiting', indexed by
-- the ZSET '<tag>:waiting' (score: when they joined): never delivered, no attempt, no snooze.
-- A head that ends (done, dead, gone, or retried unordered) passes the turn in the same script:
-- turn_pass makes the oldest waiting job the head and puts it where a job goes (ready now, or
-- scheduled when its visible_at is later). An id in a line that is no longer in 'waiting'
-- (purged) is stepped over, once.
local function turn_pass(job_prefix, id, lk, now)
  -- ``id`` ended its turn on ``lk`` (nothing happens when it is not the head): the oldest
  -- waiting job becomes the head, with a 'turn' event, and is placed (or, with a group, asks
  -- it for a slot); an empty line frees the key. Returns the new head's id, or nil.
  if not lk or lk == '' then return nil end
  local tag = tag_of(job_prefix)
  guard_turn(tag, lk, now)
  local turns, line = tag .. K.turns, tag .. K.line .. lk
  local head = redis.call('HGET', turns, lk)
  -- (a key whose head is gone, its record removed by hand or as damaged, passes the turn too)
  if head ~= id and not (not head and redis.call('LLEN', line) > 0) then return nil end
  local nxt = pop_waiting(job_prefix, line, nil)
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
  local f = redis.pcall('HMGET', job_prefix .. id, 'state', 'waits_on')
  if f.err then return false end  -- (not a hash: no head)
  return HEAD_STATES[f[1] or ''] or (f[1] == S.waiting and (f[2] == 'group' or f[2] == 'limit'))
end

local function turn_join(job_prefix, id, lk, now)
  -- ``id`` (lock key ``lk``, not '') joins its key: true when it holds the turn (the caller
  -- places it, or asks its group); false when it now waits at the end of the key's line. A
  -- head that is no head any more (its record lost or removed by hand) is passed over first,
  -- so a key is never stuck behind it.
  local tag = tag_of(job_prefix)
  guard_turn(tag, lk, now)
  local turns = tag .. K.turns
  local head = redis.call('HGET', turns, lk)
  if head and head ~= id and not is_head(job_prefix, head) then
    turn_pass(job_prefix, head, lk, now)
    head = redis.call('HGET', turns, lk)
  end
  if not head or head == id then
    redis.call('HSET', turns, lk, id)
    return true
  end
  wait_in(job_prefix, tag .. K.line .. lk, id, now, 'lock', nil)
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

local MEND_SAMPLE = 20  -- waiting jobs a sweep looks at (a random sample: each is seen in time)

local function waiting_mend(job_prefix, now)
  -- the sweep's look at a sample of the waiting jobs: one whose line is gone (removed by hand,
  -- or as damaged: guard) would wait for ever, so it joins again (its key, its group; a gate's
  -- goes back to ready, where reserve takes its gate again). Returns how many joined again.
  local tag = tag_of(job_prefix)
  if not guard(tag, tag .. K.waiting, R.waiting, now) then return 0 end
  local mended = 0
  for _, id in ipairs(redis.call('ZRANDMEMBER', tag .. K.waiting, MEND_SAMPLE)) do
    local f = redis.pcall('HMGET', job_prefix .. id, 'state', 'waits_on', 'lock_key', 'fgroup', 'gate')
    if f.err or f[1] ~= S.waiting then
      if f.err or not f[1] then redis.call('ZREM', tag .. K.waiting, id) end  -- (no job: gone)
    else
      local line = (f[2] == 'lock' and f[3] and tag .. K.line .. f[3])
                   or (f[2] == 'group' and f[4] and tag .. K.group_line .. f[4])
                   or (f[2] == 'limit' and f[5] and tag .. K.gate_line .. f[5]) or nil
      if line and redis.call('EXISTS', line) == 0 then
        redis.call('ZREM', tag .. K.waiting, id)
        redis.call('HDEL', job_prefix .. id, 'waits_on')
        mended = mended + 1
        if f[2] == 'limit' then
          place(job_prefix, id, now, true)
        elseif f[2] == 'group' then
          if tonumber(redis.call('ZINCRBY', tag .. K.group_waiting, -1, f[4])) <= 0 then
            redis.call('ZREM', tag .. K.group_waiting, f[4])
          end
          if group_join(job_prefix, id, f[4], now) then place(job_prefix, id, now, true) end
        elseif admit(job_prefix, id, f[3], f[4] or '', now) then
          place(job_prefix, id, now, true)
        end
      end
    end
  end
  if mended > 0 then redis.call('HINCRBY', tag .. K.stats, 'waiting_mended', mended) end
  return mended
end
