-- lock_conflict: count one conflict (a job found its business lock held) on ``key``: all-time per
-- key, one entry in the last hour's timeline (for the all-keys per-minute rate), and the key's
-- count in the current minute's bucket (for per-key figures over the last 5 minutes / hour).
-- All keys share the {locks} hash tag.
-- KEYS[1] per-key totals ZSET   KEYS[2] conflict timeline ZSET   KEYS[3] this minute's bucket ZSET
-- KEYS[4] all-keys counter STRING
-- ARGV[1] business key   ARGV[2] now ms   ARGV[3] unique timeline member   ARGV[4] bucket TTL ms
-- Returns: the key's count in this minute.
local now = tonumber(ARGV[2])
redis.call('ZINCRBY', KEYS[1], 1, ARGV[1])
redis.call('INCR', KEYS[4])
redis.call('ZADD', KEYS[2], now, ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - 3600000)
local n = redis.call('ZINCRBY', KEYS[3], 1, ARGV[1])
redis.call('PEXPIRE', KEYS[3], tonumber(ARGV[4]))
return tonumber(n)
