-- failure_add: count one failure in a sliding window (login throttling).
-- KEYS[1] failures zset   ARGV[1] now_ms   ARGV[2] window_ms   ARGV[3] unique member
-- Returns: failures now in the window.
local now, window = tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
redis.call('ZADD', KEYS[1], now, ARGV[3])
redis.call('PEXPIRE', KEYS[1], window)
return redis.call('ZCARD', KEYS[1])
