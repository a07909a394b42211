-- fail_many: a worker's batch of failed jobs (Queue.fail_many): each retried
-- (in-flight -> scheduled, or ended as cancelled when an operator asked) or buried (in-flight
-- -> the DLQ), each only for the holder of its current lease, exactly as retry.lua / bury.lua
-- do it for one job (retry_job / bury_failed in _failure.lua: fences, cancel_end, per-key turns,
-- group slots, the error, traceback, error group and timeline event). One job whose record
-- breaks a script part-way is dealt with alone (pcall): it stays in inflight (put back there
-- if it was taken out) for the sweeper, its reply says why, and the others go on.
-- KEYS[1] inflight   KEYS[2] scheduled   KEYS[3] ready   KEYS[4] stats   KEYS[5] dead
-- KEYS[6] errgroups   KEYS[7] cancels
-- ARGV[1] job_prefix   ARGV[2] now_ms   ARGV[3] dead-by-type prefix   ARGV[4] dead-by-group prefix
-- ARGV[5 ..] eleven per job: op ('retry' | 'bury'), id, epoch, error, kind, traceback, the
-- caller's event details as JSON (''), spend attempt 1|0, then for a retry: visible_at_ms,
-- stats counter, keep the key's turn 1|0; for a bury: reason, error signature, ''.
-- Returns: one reply per job, in order: retry.lua's ('OK', 'CANCELLED') or bury.lua's
-- ('OK:<group>'), or 'LOST:<why>' (nothing changed for a lost lease).
local prefix, now = ARGV[1], tonumber(ARGV[2])
local out = {}
-- the burials' shared parts: tracebacks' heads read or stored, error groups counted (written
-- once below)
local call = {heads = {}, eg = {}}

local function one(i)
  local id, epoch = ARGV[i + 1], ARGV[i + 2]
  local job, tl = prefix .. id, tl_key(prefix, id)
  if ARGV[i] == 'retry' then
    return retry_job({job, KEYS[1], KEYS[2], KEYS[3], KEYS[4], tl, KEYS[5], KEYS[6], KEYS[7]},
                     id, epoch, now, tonumber(ARGV[i + 8]) or now,
                     {ARGV[i + 7], '0', ARGV[i + 3], ARGV[i + 4], ARGV[i + 5], ARGV[i + 9],
                      ARGV[i + 6], '', '0', ARGV[i + 10], ARGV[3], ARGV[4]})
  end
  return bury_failed({job, KEYS[1], KEYS[5], KEYS[4], KEYS[6], tl}, id, epoch, now,
                     {ARGV[i + 8], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5], ARGV[i + 9], ARGV[3],
                      ARGV[4], ARGV[i + 7], ARGV[i + 6], ''}, call)
end

for i = 5, #ARGV - 10, 11 do
  local ok, reply = pcall(one, i)
  if not ok then
    redis.call('ZADD', KEYS[1], 'NX', now, ARGV[i + 1])  -- its lease expiry deals with it
    reply = 'LOST:' .. tostring(type(reply) == 'table' and reply.err or reply)
  end
  out[#out + 1] = reply
end
eg_flush(KEYS[6], call.eg)
return out
