-- rate_take: token bucket. Refills at rate_per_s up to burst; takes n tokens when there are n.
-- KEYS[1] bucket (HASH tokens, ts)
-- ARGV[1] rate per second (> 0)   ARGV[2] burst (capacity, >= n)   ARGV[3] n   ARGV[4] now_ms
-- Returns: {1, tokens left (string)} taken; {0, ms to wait until n tokens are there, tokens}
-- A missing bucket is full. Nothing is taken when the caller has to wait.
local rate, burst, n, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local b = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens, ts = tonumber(b[1]), tonumber(b[2])
if not tokens or not ts then tokens, ts = burst, now end
if now > ts then
  tokens = math.min(burst, tokens + (now - ts) * rate / 1000)
  ts = now
end
local ttl = math.ceil(burst / rate * 1000) * 2 + 60000
if tokens >= n then
  tokens = tokens - n
  redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', ts)
  redis.call('PEXPIRE', KEYS[1], ttl)
  return {1, tostring(tokens)}
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', ts)
redis.call('PEXPIRE', KEYS[1], ttl)
return {0, math.ceil((n - tokens) * 1000 / rate), tostring(tokens)}
