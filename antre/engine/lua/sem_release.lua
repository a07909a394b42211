-- sem_release: give a semaphore slot back (expired slots are pruned on the way).
-- KEYS[1] semaphore (ZSET holder -> expiry ms)
-- ARGV[1] holder   ARGV[2] now_ms
-- Returns: {1 if the holder had a slot else 0, slots in use after}
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[2])
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
return {removed, redis.call('ZCARD', KEYS[1])}
