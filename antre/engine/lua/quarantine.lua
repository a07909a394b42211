-- quarantine: an in-flight job whose id the client cannot decode (bytes that are not UTF-8:
-- Queue.reserve found it in reserve's reply) -> the queue's quarantine (see "Records that are
-- not job hashes" in _lib.lua), out of the in-flight set; its hash is left where it is.
-- KEYS[1] inflight (ZSET)   KEYS[2] quarantine (LIST)   KEYS[3] stats (HASH)
-- ARGV[1] the id (as bytes)   ARGV[2] now_ms   ARGV[3] why
-- Returns: 1 quarantined, 0 the id is not in flight (nothing changed).
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
quarantine(KEYS[2], KEYS[3], tonumber(ARGV[2]), ARGV[1], ARGV[3])
return 1
