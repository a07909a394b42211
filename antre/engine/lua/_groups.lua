-- Groups (fair shares): slots, lines, operators' overrides and group rates.
-- Part of the scripts' shared library (_lib.lua lists the parts in order).

-- Groups (fair shares): a job with a group ('fgroup') holds one of its group's slots while it
-- is ready, scheduled or in flight (SET '<tag>:gheld:<group>'); a group has 'gconc' slots (its
-- jobs' group_concurrency, GROUP_WINDOW when none; an operator's override in HASH
-- '<tag>:glimits', group_override). A job finding them all taken waits in the group's line
-- ('<tag>:gline:<group>') and takes the slot a leaving job frees (group_leave). With at most
-- that many ready jobs per group, a group of a million jobs and a group of ten both have their
-- share of the ready list; one reserve takes only its share of a group's slots (reserve.lua). ZSETs '<tag>:gwait' / '<tag>:gslots' (group -> jobs waiting /
-- slots held) are the Groups page's bounded index. A job with a lock_key is first its key's
-- head, then asks its group for a slot. A waiting job's field 'waits_on' says which line.
local GROUP_WINDOW = 128  -- a group naming no group_concurrency (see bench/results/perkey.md)

local function group_override(job_prefix, g, now)
  -- an operator's override of group ``g`` while it lasts (HASH '<tag>:glimits', group ->
  -- '<slots>|<until ms>|<n>/<window ms>', either limit '' when not overridden, until 0: until
  -- cleared; group_limit.lua): its slots (or nil) and its rate's n and window (or nil)
  local raw = redis.call('HGET', tag_of(job_prefix) .. K.group_limits, g)
  if not raw then return nil, nil, nil end
  local n, untl, rate = string.match(raw, '^(%d*)|(%d+)|?(.*)$')
  if not untl or (untl ~= '0' and tonumber(untl) <= now) then return nil, nil, nil end
  local rn, rw = string.match(rate, '^(%d+)/(%d+)$')
  rn, rw = tonumber(rn), tonumber(rw)
  if not rn or rn < 1 or rw < 1 then rn, rw = nil, nil end
  return tonumber(n), rn, rw
end

local function group_limit(job_prefix, id, g, now)
  -- the group's slots: an operator's override while it lasts, else the job's own 'gconc',
  -- else GROUP_WINDOW
  local n = group_override(job_prefix, g, now)
  if n then return n end
  return num_field(job_prefix .. id, 'gconc', GROUP_WINDOW)
end

-- Group rates (group_rate="10/s"): a job of a group with a rate (its field 'grate',
-- '<n>/<window ms>') is given its start when it takes a slot: at most n of the group's jobs
-- start in any window of that length (a sliding window, not a bucket that refills). ZSET
-- '<tag>:grate:<group>' (keys.QueueKeys.group_rate) holds the group's starts of the last window
-- and those ahead (member: the job's id, score: its start; the key expires a window after the
-- newest); the next start is the n-th newest + the window, or now. A job's start is when it is
-- made ready; when it ends (group_leave) its score becomes the time it was reserved if that was
-- later (no worker free, or the promotion pass's lag), so the next starts count from the real
-- ones. A start later than now makes that one job wait in 'scheduled' for it (its visible_at;
-- field 'rate_due' says why), holding its slot, promoted by promote_due.lua like any delayed
-- job. While such a start is ahead the group is at its rate (rate_blocked): its next jobs wait
-- in the group's line, and the scheduled job's end gives the next starts. So no job is
-- delivered early, snoozed or charged an attempt for its group's rate, no start is given more
-- than a window ahead, and the ready list holds only other groups' jobs meanwhile. A retried
-- or swept job keeps its slot and its start (no second one is taken). An operator's override
-- of the group's rate (group_override) replaces its jobs' own, or gives a group a rate its
-- jobs do not name; the start it gave ahead is given again under the new rate (rate_regive).
local function rate_of(job_prefix, id, g, now)
  -- the rate of ``id``'s group ``g``: an operator's override of it while it lasts (a group
  -- whose jobs name no rate can be given one), else the job's own 'grate'; nil: none
  local _, on, ow = group_override(job_prefix, g, now)
  if on then return on, ow end
  local raw = redis.call('HGET', job_prefix .. id, 'grate')
  if not raw or raw == '' then return nil, nil end
  local n, w = string.match(raw, '^(%d+)/(%d+)$')
  n, w = tonumber(n), tonumber(w)
  if not n or n < 1 or w < 1 then return nil, nil end
  return n, w
end

local function rate_blocked(job_prefix, id, g, now)
  -- whether ``id`` (of group ``g``) must wait in the line: its group has a rate, has given a
  -- start that is still ahead, and one of its jobs holds a slot (whose end fills the line
  -- again: with none, e.g. the scheduled one purged, the job takes its slot and a start)
  if not rate_of(job_prefix, id, g, now) then return false end
  local tag = tag_of(job_prefix)
  local newest = redis.call('ZREVRANGE', tag .. K.group_rate .. g, 0, 0, 'WITHSCORES')
  return newest[2] ~= nil and tonumber(newest[2]) > now and
         redis.call('SCARD', tag .. K.group_held .. g) > 0
end

local function rate_start(job_prefix, id, g, now)
  local n, w = rate_of(job_prefix, id, g, now)
  if not n then return end
  local key = job_prefix .. id
  local starts = tag_of(job_prefix) .. K.group_rate .. g
  redis.call('ZREMRANGEBYSCORE', starts, '-inf', now - w)  -- (they limit no start now)
  local at = now
  local nth = redis.call('ZREVRANGE', starts, n - 1, n - 1, 'WITHSCORES')
  if nth[2] and tonumber(nth[2]) + w > now then at = tonumber(nth[2]) + w end
  redis.call('ZADD', starts, at, id)
  if redis.call('PTTL', starts) < at - now + w then
    redis.call('PEXPIRE', starts, at - now + w)  -- (relative: now is the caller's clock)
  end
  if at > now and at > num_field(key, 'visible_at', 0) then
    redis.call('HSET', key, 'visible_at', at, 'rate_due', at)
  end
end

local function rate_started(job_prefix, id, g, now)
  -- a job of a group with a rate left its slot: its start becomes the time it was reserved,
  -- when that was later than the start it was given
  local _, w = rate_of(job_prefix, id, g, now)
  if not w then return end
  local began = tonumber(redis.call('HGET', job_prefix .. id, 'reserved_at') or '')
  if not began or began + w <= now then return end
  local starts = tag_of(job_prefix) .. K.group_rate .. g
  local given = tonumber(redis.call('ZSCORE', starts, id) or '')
  if given and given >= began then return end
  redis.call('ZADD', starts, began, id)
  if redis.call('PTTL', starts) < began - now + w then
    redis.call('PEXPIRE', starts, began - now + w)
  end
end

local function rate_regive(job_prefix, g, now)
  -- after an operator changed ``g``'s rate: the starts it gave ahead (its jobs scheduled for
  -- them: one at a time, at most 100 here) are given again under the rate now, sooner or later
  -- (a job whose new start is now is made ready)
  local tag = tag_of(job_prefix)
  local starts = tag .. K.group_rate .. g
  local ahead = redis.call('ZRANGEBYSCORE', starts, '(' .. now, '+inf', 'LIMIT', 0, 100)
  if #ahead == 0 then return end
  redis.call('ZREM', starts, unpack(ahead))
  for _, id in ipairs(ahead) do
    local key = job_prefix .. id
    local f = redis.call('HMGET', key, 'state', 'rate_due', 'visible_at')
    if f[1] == S.scheduled and f[2] and f[2] == f[3] then
      redis.call('HSET', key, 'visible_at', now)  -- (the old start set it: it goes)
      redis.call('HDEL', key, 'rate_due')
      rate_start(job_prefix, id, g, now)
      local at = num_field(key, 'visible_at', now)
      if at > now then
        redis.call('ZADD', tag .. K.scheduled, at, id)
      else
        redis.call('ZREM', tag .. K.scheduled, id)
        place(job_prefix, id, now, true)
      end
    end
  end
end

local function slot_take(job_prefix, g, id, now)
  local tag = tag_of(job_prefix)
  if redis.call('SADD', tag .. K.group_held .. g, id) == 1 then
    redis.call('ZINCRBY', tag .. K.group_slots, 1, g)
    rate_start(job_prefix, id, g, now)
  end
end

local function group_fill(job_prefix, g, now, limit)
  -- while ``g`` has a free slot (and is not at its rate: rate_blocked), its oldest waiting
  -- job takes it and is placed (at most 100 per call: a raised limit fills over the next calls)
  local tag = tag_of(job_prefix)
  local held, line = tag .. K.group_held .. g, tag .. K.group_line .. g
  for _ = 1, 100 do
    if redis.call('SCARD', held) >= limit then return end
    local oldest = redis.call('LINDEX', line, -1)
    if oldest and rate_blocked(job_prefix, oldest, g, now) then return end
    local nxt = pop_waiting(job_prefix, line, g)
    if not nxt then return end
    slot_take(job_prefix, g, nxt, now)
    place(job_prefix, nxt, now, false)
    tl_add_json(tl_key(job_prefix, nxt), now, 'turn', '""', '{"group":' .. cjson.encode(g) .. '}')
  end
end

local function group_over(job_prefix, id, now, back)
  -- at reserve, while a group of the queue has an operator's limit: true when ``id``'s group
  -- holds more slots than its override allows now (it was lowered), so ``id`` gives its slot
  -- back and waits, untouched, at the front of the group's line (``back``: group -> ids, in
  -- the order reserve met them; group_over_end puts them there). The start its group's rate
  -- gave it is dropped: it did not start.
  local g = redis.pcall('HGET', job_prefix .. id, 'fgroup')
  if type(g) ~= 'string' or g == '' then return false end
  local n = group_override(job_prefix, g, now)
  local tag = tag_of(job_prefix)
  local held = tag .. K.group_held .. g
  if not n or redis.call('SCARD', held) <= n then return false end
  if redis.call('SREM', held, id) == 0 then return false end
  if tonumber(redis.call('ZINCRBY', tag .. K.group_slots, -1, g)) <= 0 then
    redis.call('ZREM', tag .. K.group_slots, g)
  end
  redis.call('ZREM', tag .. K.group_rate .. g, id)
  redis.call('ZADD', tag .. K.waiting, now, id)
  redis.call('HSET', job_prefix .. id, 'state', S.waiting, 'waits_on', 'group')
  redis.call('ZINCRBY', tag .. K.group_waiting, 1, g)
  back[g] = back[g] or {}
  table.insert(back[g], 1, id)  -- newest met first: the first met is RPUSHed last
  return true
end

local function group_over_end(job_prefix, back)
  for g, ids in pairs(back) do
    redis.call('RPUSH', tag_of(job_prefix) .. K.group_line .. g, unpack(ids))
  end
end

local HEAD_STATES = {ready = true, scheduled = true, inflight = true}

local function group_join(job_prefix, id, g, now)
  -- ``id`` asks group ``g`` for a slot: true when it has one (the caller places it); false
  -- when it now waits at the end of the group's line. A slot whose job is gone (removed by
  -- hand) is found and freed, one per call.
  local tag = tag_of(job_prefix)
  guard_group(tag, g, now)
  local held, line = tag .. K.group_held .. g, tag .. K.group_line .. g
  if redis.call('SISMEMBER', held, id) == 1 then return true end
  local limit = group_limit(job_prefix, id, g, now)
  if redis.call('SCARD', held) >= limit then
    local one = redis.call('SRANDMEMBER', held)
    local st = redis.call('HMGET', job_prefix .. (one or ''), 'state', 'waits_on')
    if one and not HEAD_STATES[st[1] or ''] and not (st[1] == S.waiting and st[2] == 'limit') then
      redis.call('SREM', held, one)
      redis.call('ZINCRBY', tag .. K.group_slots, -1, g)
    end
  end
  if redis.call('LLEN', line) > 0 then group_fill(job_prefix, g, now, limit) end
  if redis.call('SCARD', held) < limit and redis.call('LLEN', line) == 0
      and not rate_blocked(job_prefix, id, g, now) then
    slot_take(job_prefix, g, id, now)
    return true
  end
  wait_in(job_prefix, line, id, now, 'group', g)
  return false
end

local function group_leave(job_prefix, id, g, now)
  -- ``id`` left group ``g``'s slot (done, dead, gone, or waiting on its key again): the
  -- group's oldest waiting job takes it
  if not g or g == '' then return end
  local tag = tag_of(job_prefix)
  -- (slots lost with a damaged record: guard_group false; the line fills them again)
  local sound = guard_group(tag, g, now)
  local left = redis.call('SREM', tag .. K.group_held .. g, id) == 1
  if not left and sound then return end
  if left and tonumber(redis.call('ZINCRBY', tag .. K.group_slots, -1, g)) <= 0 then
    redis.call('ZREM', tag .. K.group_slots, g)
  end
  rate_started(job_prefix, id, g, now)
  group_fill(job_prefix, g, now, group_limit(job_prefix, id, g, now))
end
