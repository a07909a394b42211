-- lock_acquire: SET NX PX with a random token; on success also bump the key's fencing counter
-- and, when KEYS[3] is given, index the key as held (not on a Redis Cluster, where the index
-- lives in another slot and the caller indexes it itself).
-- KEYS[1] lock   KEYS[2] fence counter   KEYS[3] held-locks index (optional)
-- KEYS[4] held-since HASH (optional, with KEYS[3]): key -> '<now_ms>|<ARGV[5]>'
-- ARGV[1] token   ARGV[2] ttl_ms   ARGV[3] business key   ARGV[4] now_ms
-- ARGV[5] the holder job as '<queue>/<job id>' ('' unknown)
-- ARGV[6] (optional) the lease epoch of that job's delivery: a lock a hand-over took for this
-- very delivery (handover.lua: value '<token>.<epoch>', held-since naming the job) is adopted
-- (another runner's reserve won the delivery between the hand-over and its own reserve)
-- Returns: {1, fencing token} acquired; {0, holder token, pttl, the holder's fencing token}
-- busy (the counter's value: the last acquire's token).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', tonumber(ARGV[2])) then
  if KEYS[3] then
    redis.call('ZADD', KEYS[3], tonumber(ARGV[4]) + tonumber(ARGV[2]), ARGV[3])
    if KEYS[4] then redis.call('HSET', KEYS[4], ARGV[3], ARGV[4] .. '|' .. (ARGV[5] or '')) end
  end
  return {1, redis.call('INCR', KEYS[2])}
end
local e = ARGV[6]
if KEYS[4] and e and e ~= '' and ARGV[5] and ARGV[5] ~= '' then
  local v = redis.call('GET', KEYS[1])
  local since = redis.call('HGET', KEYS[4], ARGV[3])
  if v and since and string.sub(v, -(#e + 1)) == '.' .. e
      and string.match(since, '^%d+|(.*)$') == ARGV[5] then
    redis.call('SET', KEYS[1], ARGV[1], 'XX', 'PX', tonumber(ARGV[2]))
    redis.call('ZADD', KEYS[3], tonumber(ARGV[4]) + tonumber(ARGV[2]), ARGV[3])
    redis.call('HSET', KEYS[4], ARGV[3], ARGV[4] .. '|' .. ARGV[5])
    return {1, redis.call('INCR', KEYS[2])}
  end
end
return {0, redis.call('GET', KEYS[1]) or '', redis.call('PTTL', KEYS[1]),
        tonumber(redis.call('GET', KEYS[2]) or '0') or 0}
