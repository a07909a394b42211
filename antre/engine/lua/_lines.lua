-- Placing a job whose turn came (ready or scheduled), and the lines jobs wait in (a
-- lock key's, a group's, a gate's): join one, pop its oldest.
-- Part of the scripts' shared library (_lib.lua lists the parts in order).

local function place(job_prefix, id, now, oldest_end)
  -- a job whose turn came: ready (at the oldest end of the list: the next to run; else at the
  -- newest, behind the other groups' ready jobs), or scheduled when its visible_at is later
  local tag, key = tag_of(job_prefix), job_prefix .. id
  local visible = num_field(key, 'visible_at', 0)
  if visible > now then
    redis.call('HSET', key, 'state', S.scheduled)
    redis.call('ZADD', tag .. K.scheduled, visible, id)
  else
    redis.call('HSET', key, 'state', S.ready)
    redis.call(oldest_end and 'RPUSH' or 'LPUSH', tag .. K.ready, id)
    wake(tag .. K.wake, 1)
  end
end

local function wait_in(job_prefix, line, id, now, on, group)
  -- ``id`` waits at the end of ``line`` ('lock' or 'group': field 'waits_on')
  redis.call('LPUSH', line, id)
  redis.call('ZADD', tag_of(job_prefix) .. K.waiting, now, id)
  redis.call('HSET', job_prefix .. id, 'state', S.waiting, 'waits_on', on)
  if group then redis.call('ZINCRBY', tag_of(job_prefix) .. K.group_waiting, 1, group) end
end

local function pop_waiting(job_prefix, line, group)
  -- the oldest id of ``line`` still waiting (ids purged meanwhile are dropped), or nil
  local tag = tag_of(job_prefix)
  while true do
    local nxt = redis.call('RPOP', line)
    if not nxt then return nil end
    if group and tonumber(redis.call('ZINCRBY', tag .. K.group_waiting, -1, group)) <= 0 then
      redis.call('ZREM', tag .. K.group_waiting, group)
    end
    -- (not in the index: purged, unless the index itself was lost and its record still waits)
    if redis.call('ZREM', tag .. K.waiting, nxt) == 1 or
        redis.pcall('HGET', job_prefix .. nxt, 'state') == S.waiting then
      redis.pcall('HDEL', job_prefix .. nxt, 'waits_on')
      return nxt
    end
  end
end
