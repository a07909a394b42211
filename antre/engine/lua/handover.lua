-- handover: a worker's end of a job that held its business lock on a Redis where the lock's
-- keys and the queue's are one server's (not a cluster), in one transition with the hand-over
-- of the key to its next job (the hot key): the lock is checked and released, the job
-- acked (ack.lua's transition: ack_job passes the key's turn), and when the key's new head is
-- now the job the next reserve takes (the oldest end of ready; nothing paused in the queue, no
-- limit gate on its type, no cancel request, the same job type, so the same lock ttl) its lock
-- is taken for the caller, who reserves it in the same write (Queue.handover: this script,
-- then reserve.lua) and adopts that lock for the delivery named in the reply. The wake token
-- the turn's placing pushed is taken back then (the caller is not idle: no runner wakes for a
-- job it would not get).
-- KEYS[1] job (HASH)   KEYS[2] inflight (ZSET)   KEYS[3] done (ZSET)   KEYS[4] stats (HASH)
-- KEYS[5] the job's timeline (LIST)   KEYS[6] lock (STRING)   KEYS[7] lock's fence counter
-- KEYS[8] held-locks index (ZSET)   KEYS[9] held-since (HASH)   KEYS[10] ready (LIST)
-- KEYS[11] paused (HASH)   KEYS[12] wake (LIST)   KEYS[13] turns (HASH)
-- KEYS[14] limit gates by job type (HASH '<tag>:lactive')
-- ARGV[1 .. 10] as ack.lua's   ARGV[11] the lock's token   ARGV[12] the business key
-- ARGV[13] a token for the next head's lock ('' none; stored as '<token>.<epoch>')   ARGV[14] its ttl_ms
-- ARGV[15] the job type that ttl is for   ARGV[16] the holder prefix ('<queue>/')
-- Returns: {status, next id, epoch, fence}: status 'OK', 'LOST:<why>' (the lease: the job left
-- unchanged, the lock released), or 'LOCK' (the lock is not held by ARGV[11]: it expired or
-- was force-released while the job ran; nothing changed, the caller snoozes the job); next id
-- '' or the head whose lock was taken (token ARGV[13], fencing token 'fence') for the
-- delivery of lease epoch 'epoch' (the next reserve's).
local id, now, lk = ARGV[1], tonumber(ARGV[3]), ARGV[12]
if redis.call('GET', KEYS[6]) ~= ARGV[11] then return {'LOCK', '', 0, 0} end
redis.call('DEL', KEYS[6])
redis.call('ZREM', KEYS[8], lk)
redis.call('HDEL', KEYS[9], lk)
local kind = ARGV[8] == 'deduplicated' and 'deduplicated' or 'completed'
local lost, latency = ack_job(KEYS[1], KEYS[5], id, ARGV[2], now, ARGV[4], kind, ARGV[9], ARGV[10])
if lost then return {lost, '', 0, 0} end
redis.call('ZREM', KEYS[2], id)
redis.call('ZADD', KEYS[3], now, id)
redis.call('HINCRBY', KEYS[4], ARGV[8], 1)
if latency then redis.call('HINCRBY', KEYS[4], 'latency_ms_total', latency) end
trim_done(KEYS[3], ARGV[7], now, tonumber(ARGV[5]), tonumber(ARGV[6]), 20)
if ARGV[13] == '' then return {'OK', '', 0, 0} end
local nxt = redis.call('HGET', KEYS[13], lk)
if not nxt or nxt == id or redis.call('LINDEX', KEYS[10], -1) ~= nxt
    or redis.call('HLEN', KEYS[11]) > 0 then
  return {'OK', '', 0, 0}
end
local f = redis.pcall('HMGET', ARGV[7] .. nxt, 'type', 'cancel', 'epoch')
if f.err or f[1] ~= ARGV[15] or (f[2] and f[2] ~= '') or redis.call('HEXISTS', KEYS[14], f[1]) == 1 then
  return {'OK', '', 0, 0}
end
-- the epoch reserve.lua hands out next: a job stored without one is new (0 + 1); a damaged one
-- is left to the ordinary acquire (reserve restarts it from the clock)
local epoch = f[3] and tonumber(f[3]) or 0
if not epoch or epoch ~= math.floor(epoch) or epoch < 0 then return {'OK', '', 0, 0} end
local ttl = tonumber(ARGV[14])
-- the lock's value names the delivery it is for ('<token>.<epoch>'; the held-since entry names
-- the job): a reserve by another runner that wins that very delivery (the caller's reserve.lua
-- runs after this script, and another client's may run between the two) adopts the lock in
-- lock_acquire.lua instead of finding it busy and snoozing the head
if not redis.call('SET', KEYS[6], ARGV[13] .. '.' .. (epoch + 1), 'NX', 'PX', ttl) then
  return {'OK', '', 0, 0}
end
redis.call('ZADD', KEYS[8], now + ttl, lk)
redis.call('HSET', KEYS[9], lk, ARGV[3] .. '|' .. ARGV[16] .. nxt)
redis.call('LPOP', KEYS[12])
return {'OK', nxt, epoch + 1, redis.call('INCR', KEYS[7])}
