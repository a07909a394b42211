-- flow_cancel: an operator cancels a whole flow, one bounded chunk of its jobs per call
-- (antre/flows/ FlowReader.cancel calls again with the next start until the end).
-- KEYS[1] the flow (HASH)   KEYS[2] its jobs (LIST)   KEYS[3] held (ZSET)   KEYS[4] scheduled
-- KEYS[5] waiting (ZSET)   KEYS[6] cancels (HASH)   KEYS[7] dead (ZSET)   KEYS[8] stats
-- KEYS[9] errgroups (HASH)
-- ARGV[1] job_prefix   ARGV[2] now_ms   ARGV[3] the request JSON {by, to, reason, at} (as
-- cancel_request.lua's)   ARGV[4] the first index of KEYS[2] to look at   ARGV[5] how many
-- ARGV[6] dead-by-type prefix   ARGV[7] dead-by-group prefix
-- The first call (ARGV[4] = 0) makes the flow 'cancelled' (who, why, when), refused for a
-- flow that succeeded or was cancelled already: from then on nothing of it settles or is
-- released. Each job of the chunk that has not ended: one held, scheduled or waiting ends as
-- cancelled at once (cancel_end: to the DLQ with the reason, or discarded, as asked); one in
-- flight gets the cancel request its worker carries out (cancel_request.lua's); a ready one
-- gets it too, and the reserve that pops it ends it (reserve.lua). A record that is not a
-- hash is passed over (the scripts that meet it deal with it).
-- Returns: {jobs looked at, cancelled now, requested, the next start (-1: the end)}, or
-- 'FINISHED:<state>' / 'GONE' with nothing changed.
local prefix, now = ARGV[1], tonumber(ARGV[2])
local fk, start, count = KEYS[1], tonumber(ARGV[4]), tonumber(ARGV[5])
local fid = string.sub(fk, #tag_of(prefix) + #K.flow + 1)
-- (a damaged record of the flow is quarantined: guard; a flow whose hash it was is gone)
if not guard_flow(tag_of(prefix), fk, now) then return 'GONE' end
local state = redis.call('HGET', fk, 'state')
if not state then return 'GONE' end
local req = cancel_of(ARGV[3]) or {}
if start == 0 then
  if state == FS.succeeded or state == FS.cancelled then return 'FINISHED:' .. state end
  flow_move(prefix, fk, fid, FS.cancelled, now)
  redis.call('HSET', fk, 'cancelled_by', tostring(req.by or '?'),
             'cancel_reason', tostring(req.reason or ''))
end
local dlq = {KEYS[7], KEYS[8], KEYS[9], ARGV[6], ARGV[7]}
local reason = 'cancelled by ' .. tostring(req.by or '?') .. ' with its flow ' .. fid ..
               ((req.reason or '') ~= '' and (': ' .. tostring(req.reason)) or '')
local from = {held = KEYS[3], scheduled = KEYS[4], waiting = KEYS[5]}
local ids = redis.call('LRANGE', KEYS[2], start, start + count - 1)
local ended, requested = 0, 0
for _, id in ipairs(ids) do
  local key = prefix .. id
  local st = redis.pcall('HGET', key, 'state')
  if type(st) == 'string' and from[st] then
    redis.call('ZREM', from[st], id)
    cancel_end(key, id, now, req, tostring(req.by or '?'), dlq, KEYS[6], tl_key(prefix, id),
               reason, 'cancelled: cancelled with its flow by ' .. tostring(req.by or '?'))
    ended = ended + 1
  elseif st == S.inflight or st == S.ready then
    redis.call('HSET', KEYS[6], id, ARGV[3])
    redis.call('HSET', key, 'cancel', ARGV[3])
    tl_pending(key, tl_key(prefix, id), nil)  -- (_lib.lua: a delivery's routine events)
    tl_add(tl_key(prefix, id), now, 'cancel_requested', tostring(req.by or '?'),
           {by = tostring(req.by or '?'), reason = tostring(req.reason or ''), flow = fid,
            to = req.to == 'discard' and 'discard' or 'dlq'})
    requested = requested + 1
  end
end
local nxt = -1
if #ids == count then nxt = start + count end
return {#ids, ended, requested, nxt}
