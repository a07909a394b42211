-- lock_release: compare-and-delete; when KEYS[2] is given (not on a Redis Cluster) the key also
-- leaves the held-locks index.
-- KEYS[1] lock   KEYS[2] held-locks index (optional)   ARGV[1] token   ARGV[2] business key
-- KEYS[3] held-since HASH (optional): the key's entry goes too
-- Returns: 1 released, 0 not held by this token (nothing changed).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if KEYS[2] then redis.call('ZREM', KEYS[2], ARGV[2]) end
  if KEYS[3] then redis.call('HDEL', KEYS[3], ARGV[2]) end
  return 1
end
return 0
