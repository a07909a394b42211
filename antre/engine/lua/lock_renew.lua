-- lock_renew: compare-and-expire.
-- KEYS[1] lock   ARGV[1] token   ARGV[2] ttl_ms
-- Returns: 1 renewed, 0 not held by this token (the lock was lost).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
end
return 0
