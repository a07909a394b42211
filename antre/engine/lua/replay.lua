-- replay: dead -> ready with attempts and deliveries reset (the idempotency key is kept, so
-- completed effects are skipped).
-- KEYS[1] job   KEYS[2] dead   KEYS[3] ready   KEYS[4] stats
-- ARGV[1] id   ARGV[2] now_ms   ARGV[3] dead-by-type prefix   ARGV[4] dead-by-group prefix
-- KEYS[5] the job's timeline (optional)   ARGV[5] actor (the operator)   ARGV[6] the caller's
-- event details as JSON ('': e.g. the bulk task)   ARGV[7] the paced bulk replay doing it ('' or
-- absent: none): kept on the job as 'rtask', so its failures count for the task (redrive_failed)
-- A unique job (field 'ukey': its idempotency key's index entry, same slot) takes the entry
-- back unless another job holds it.
-- A job with a lock_key rejoins its key (turn_join): the head when the key is free,
-- else at the end of the key's line, in state 'waiting' (behind the jobs enqueued meanwhile);
-- a job with a group then asks it for a slot, or waits at the end of its line (a group's rate
-- may schedule it for later: rate_start in _groups.lua).
-- Returns: 1 replayed, 0 the job is not in the dead-letter queue (nothing changed; so for a
-- record that is not a hash: discard removes it).
local id, now = ARGV[1], tonumber(ARGV[2])
local f = redis.pcall('HMGET', KEYS[1], 'state', 'type', 'group')
if f.err or f[1] ~= S.dead then return 0 end
tl_pending(KEYS[1], KEYS[5], nil)  -- (before deliveries are reset; _lib.lua)
redis.call('ZREM', KEYS[2], id)
redis.call('ZREM', ARGV[3] .. ((f[2] and f[2] ~= '') and f[2] or '(unknown)'), id)
redis.call('ZREM', ARGV[4] .. (f[3] or ''), id)
redis.call('HSET', KEYS[1], 'state', S.ready, 'attempt', 0, 'deliveries', 0, 'visible_at', now,
           'reason', '', 'replayed_at', now, 'rtask', ARGV[7] or '')
bump(KEYS[1], 'replays', 1)
local turn = redis.call('HMGET', KEYS[1], 'lock_key', 'fgroup')
if admit(prefix_of(KEYS[1], id), id, turn[1] or '', turn[2] or '', now) then
  local due = num_field(KEYS[1], 'visible_at', now)
  if due > now then  -- its group's rate starts it later (rate_start in _groups.lua)
    redis.call('HSET', KEYS[1], 'state', S.scheduled)
    redis.call('ZADD', tag_of(prefix_of(KEYS[1], id)) .. K.scheduled, due, id)
  else
    redis.call('LPUSH', KEYS[3], id)
  end
end
if KEYS[5] then tl_add(KEYS[5], now, 'replayed', ARGV[5] or '', {}, ARGV[6]) end
-- a unique job holds its idempotency key again while pending, unless another job took it
local ukey = redis.call('HGET', KEYS[1], 'ukey')
if ukey and ukey ~= '' then redis.call('SET', ukey, id, 'NX') end
redis.call('HINCRBY', KEYS[4], 'replayed', 1)
return 1
