-- lock_acquire: SET NX PX with a random token; on success also bump the key's fencing counter.
-- KEYS[1] lock   KEYS[2] fence counter
-- ARGV[1] token   ARGV[2] ttl_ms
-- Returns: {1, fencing token} acquired; {0, holder token, pttl} busy.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', tonumber(ARGV[2])) then
  return {1, redis.call('INCR', KEYS[2])}
end
return {0, redis.call('GET', KEYS[1]) or '', redis.call('PTTL', KEYS[1])}
