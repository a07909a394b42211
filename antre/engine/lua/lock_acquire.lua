-- lock_acquire: SET NX PX with a random token; on success also bump the key's fencing counter
-- and, when KEYS[3] is given, index the key as held (not on a Redis Cluster, where the index
-- lives in another slot and the caller indexes it itself).
-- KEYS[1] lock   KEYS[2] fence counter   KEYS[3] held-locks index (optional)
-- KEYS[4] held-since HASH (optional, with KEYS[3]): key -> '<now_ms>|<ARGV[5]>'
-- ARGV[1] token   ARGV[2] ttl_ms   ARGV[3] business key   ARGV[4] now_ms
-- ARGV[5] the holder job as '<queue>/<job id>' ('' unknown)
-- Returns: {1, fencing token} acquired; {0, holder token, pttl, the holder's fencing token}
-- busy (the counter's value: the last acquire's token).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', tonumber(ARGV[2])) then
  if KEYS[3] then
    redis.call('ZADD', KEYS[3], tonumber(ARGV[4]) + tonumber(ARGV[2]), ARGV[3])
    if KEYS[4] then redis.call('HSET', KEYS[4], ARGV[3], ARGV[4] .. '|' .. (ARGV[5] or '')) end
  end
  return {1, redis.call('INCR', KEYS[2])}
end
return {0, redis.call('GET', KEYS[1]) or '', redis.call('PTTL', KEYS[1]),
        tonumber(redis.call('GET', KEYS[2]) or '0') or 0}
