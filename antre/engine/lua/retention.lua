-- retention: one bounded pass of a queue's retention (so Redis, run with noeviction, never
-- fills): dead jobs past the maximum age, then the oldest dead jobs past the maximum count,
-- then done jobs past their retention; error groups left without jobs disappear.
-- KEYS[1] dead (ZSET by died_at)   KEYS[2] done (ZSET by finished_at)   KEYS[3] stats (HASH)
-- KEYS[4] errgroups (HASH)
-- ARGV[1] job_prefix   ARGV[2] now_ms   ARGV[3] dead: max jobs kept   ARGV[4] dead: max age ms
-- ARGV[5] done: max age ms   ARGV[6] at most this many jobs dropped by this call
-- ARGV[7] dead-by-type prefix   ARGV[8] dead-by-group prefix
-- ARGV[9 ..] error group ids to check: each one with no dead job left is removed
-- A job dropped takes its timeline and its idempotency-key index entry with it (forget_job).
-- Finished flows past the done jobs' retention go too (within the same limit; below).
-- Failed and waiting flows past the dead jobs' maximum age go too, their held jobs with them.
-- Returns: {dead jobs dropped, done jobs dropped, error groups removed, flow steps (flows
-- dropped + their jobs looked at: the caller calls again while a call used all of ``limit``)}
local prefix, now, limit = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[6])
local max_jobs, max_age, done_age = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local touched = {}

local function drop_dead(id)
  local f = redis.pcall('HMGET', prefix .. id, 'type', 'group')
  if f.err then f = {} end  -- not a hash: dropped all the same (forget_job deletes any type)
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZREM', ARGV[7] .. ((f[1] and f[1] ~= '') and f[1] or '(unknown)'), id)
  if f[2] and f[2] ~= '' then
    redis.call('ZREM', ARGV[8] .. f[2], id)
    touched[f[2]] = true
  end
  forget_job(prefix, id)
end

local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - max_age, 'LIMIT', 0, limit)
for _, id in ipairs(dead) do drop_dead(id) end
local dropped = #dead
local excess = math.min(redis.call('ZCARD', KEYS[1]) - max_jobs, limit - dropped)
if excess > 0 then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, excess - 1)
  for _, id in ipairs(oldest) do drop_dead(id) end
  dropped = dropped + #oldest
end
if dropped > 0 then redis.call('HINCRBY', KEYS[3], 'dead_dropped', dropped) end

local done = {}
if limit - dropped > 0 then
  done = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - done_age, 'LIMIT', 0, limit - dropped)
end
for _, id in ipairs(done) do
  redis.call('ZREM', KEYS[2], id)
  forget_job(prefix, id)
end

-- finished flows: a succeeded or cancelled flow's records (the flow, its jobs'
-- list, results, failed set, wake list) go once it finished longer ago than done jobs are
-- kept; its jobs go by their own retention (done, dead). A failed or waiting flow is kept as
-- long as a dead job (below).
local flows = 0
for _, st in ipairs({FS.succeeded, FS.cancelled}) do
  local budget = limit - dropped - #done - flows
  if budget <= 0 then break end
  local index = tag_of(prefix) .. K.flows_by_state .. st
  local old = redis.call('ZRANGEBYSCORE', index, '-inf', now - done_age, 'LIMIT', 0, budget)
  for _, fid in ipairs(old) do
    local fk = flow_key(prefix, fid)
    redis.call('DEL', fk, fk .. K.flow_jobs, fk .. K.flow_results, fk .. K.flow_failed, fk .. K.flow_wake)
  end
  if #old > 0 then redis.call('ZREM', index, unpack(old)) end
  flows = flows + #old
end

-- failed and waiting flows (stuck on a dead member: kept for an operator) go once they have
-- been so for longer than dead jobs are kept (failed: since it failed; waiting: since it
-- began waiting). Their records go at once, so from then on nothing of them settles or is
-- released (flow_acked / flow_dead find no flow); their jobs' list is then walked, a budget's
-- worth per call (the flow's id in LIST '<tag>:flowtrim', keys.QueueKeys.flow_trims, until
-- its list is empty): a held job (never delivered: its parents unsettled) is discarded with
-- the flow (its record, timeline and key index; counted as 'flow_held_dropped'), every other
-- job stays where it is (ready, in flight, done, dead: its own retention applies).
local tag = tag_of(prefix)
local trims, held = tag .. K.flow_trims, tag .. K.held
local looked, held_dropped = 0, 0
local function budget_left() return limit - dropped - #done - flows - looked end
for _, st in ipairs({FS.failed, FS.waiting}) do
  local budget = budget_left()
  if budget <= 0 then break end
  local index = tag .. K.flows_by_state .. st
  local old = redis.call('ZRANGEBYSCORE', index, '-inf', now - max_age, 'LIMIT', 0, budget)
  for _, fid in ipairs(old) do
    local fk = flow_key(prefix, fid)
    redis.call('DEL', fk, fk .. K.flow_results, fk .. K.flow_failed, fk .. K.flow_wake)
    redis.call('RPUSH', trims, fid)
  end
  if #old > 0 then redis.call('ZREM', index, unpack(old)) end
  flows = flows + #old
end
while budget_left() > 0 do
  local fid = redis.call('LINDEX', trims, 0)
  if not fid then break end
  local list = flow_key(prefix, fid) .. K.flow_jobs
  local want = budget_left()
  guard(tag, list, R.flow_jobs, now)  -- (damaged: quarantined, and the walk of it is over)
  local ids = redis.call('LPOP', list, want)
  if type(ids) ~= 'table' then ids = {} end
  for _, id in ipairs(ids) do
    local st = redis.pcall('HGET', prefix .. id, 'state')
    if st == S.held and redis.call('ZREM', held, id) == 1 then
      forget_job(prefix, id)
      held_dropped = held_dropped + 1
    end
  end
  looked = looked + math.max(#ids, 1)
  if #ids < want then redis.call('LPOP', trims) end
end
if held_dropped > 0 then redis.call('HINCRBY', KEYS[3], 'flow_held_dropped', held_dropped) end
if flows > 0 then redis.call('HINCRBY', KEYS[3], 'flows_dropped', flows) end

for i = 9, #ARGV do touched[ARGV[i]] = true end
local groups = 0
for group in pairs(touched) do
  if redis.call('ZCARD', ARGV[8] .. group) == 0 and redis.call('HDEL', KEYS[4], group) == 1 then
    groups = groups + 1
    redis.pcall('HDEL', string.sub(KEYS[4], 1, -(#K.error_groups + 1)) .. K.error_tracebacks, group)  -- its shared traceback
  end
end
return {dropped, #done, groups, flows + looked}
