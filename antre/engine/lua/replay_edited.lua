-- replay_edited: dead -> ready as replay.lua does (attempts and deliveries reset), with the
-- payload an operator edited and, optionally, a new idempotency key. The 'replayed' event on
-- the timeline carries the caller's details (the original payload, who, why).
-- KEYS[1] job   KEYS[2] dead   KEYS[3] ready   KEYS[4] stats   KEYS[5] the job's timeline
-- KEYS[6] the queue's idempotency-key index (HASH key -> newest job id)
-- ARGV[1] id   ARGV[2] now_ms   ARGV[3] dead-by-type prefix   ARGV[4] dead-by-group prefix
-- ARGV[5] actor   ARGV[6] event details as JSON   ARGV[7] the new payload (encoded JSON)
-- ARGV[8] the new idempotency key ('' keeps the job's own)
-- Returns: 1 replayed; 0 the job is not in the dead-letter queue; -1 a unique job's key
-- cannot change (its uniqueness entry is the key). Nothing changes unless 1.
local id, now = ARGV[1], tonumber(ARGV[2])
local f = redis.call('HMGET', KEYS[1], 'state', 'type', 'group', 'ukey', 'idem_key')
if f[1] ~= S.dead then return 0 end
local new_key = ARGV[8]
if new_key ~= '' and f[4] and f[4] ~= '' then return -1 end
tl_pending(KEYS[1], KEYS[5], nil)  -- (before deliveries are reset; _lib.lua)
redis.call('ZREM', KEYS[2], id)
redis.call('ZREM', ARGV[3] .. ((f[2] and f[2] ~= '') and f[2] or '(unknown)'), id)
redis.call('ZREM', ARGV[4] .. (f[3] or ''), id)
redis.call('HSET', KEYS[1], 'state', S.ready, 'attempt', 0, 'deliveries', 0, 'visible_at', now,
           'reason', '', 'replayed_at', now, 'payload', ARGV[7],
           'rtask', '')
if new_key ~= '' then
  unindex_key(KEYS[6], f[5], id)
  redis.call('HSET', KEYS[1], 'idem_key', new_key)
  redis.call('HSET', KEYS[6], new_key, id)
end
bump(KEYS[1], 'replays', 1)
redis.call('LPUSH', KEYS[3], id)
tl_add(KEYS[5], now, 'replayed', ARGV[5] or '', {}, ARGV[6])
local ukey = redis.call('HGET', KEYS[1], 'ukey')
if ukey and ukey ~= '' then redis.call('SET', ukey, id, 'NX') end
redis.call('HINCRBY', KEYS[4], 'replayed', 1)
return 1
