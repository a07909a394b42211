-- login_try: check every bucket of one login attempt and, when none is at its limit, reserve the
-- try in all of them, in one step (parallel attempts cannot all pass the check, then all hash).
-- KEYS[1..n] failures zsets (one per bucket: address, account, (account, address), ...)
-- ARGV[1] now_ms   ARGV[2] window_ms   ARGV[3] unique member (this try)
-- ARGV[3+i] limit of KEYS[i]
-- Returns: {1, 0} when the try is reserved (counted as a failure in every bucket until the
-- caller takes it back on success), {0, wait_ms} when a bucket is full: nothing is counted, and
-- wait_ms is when its oldest failure leaves the window.
local now, window = tonumber(ARGV[1]), tonumber(ARGV[2])
for i, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  local limit = tonumber(ARGV[3 + i])
  if redis.call('ZCARD', key) >= limit then
    local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    local wait = tonumber(oldest[2]) + window - now
    if wait < 1 then wait = 1 end
    return {0, wait}
  end
end
for _, key in ipairs(KEYS) do
  redis.call('ZADD', key, now, ARGV[3])
  redis.call('PEXPIRE', key, window)
end
return {1, 0}
