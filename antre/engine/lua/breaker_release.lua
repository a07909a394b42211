-- breaker_release: the probe holder did not call the downstream after all (held by a rate
-- limit or a concurrency limit): give the probe back so another caller can take it now.
-- KEYS[1] breaker (HASH)
-- ARGV[1] holder   ARGV[2] now_ms
-- Returns: 1 if the holder had the probe, else 0
local b = redis.call('HMGET', KEYS[1], 'state', 'probe')
if b[1] ~= 'half_open' or b[2] ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'probe', '', 'probe_until', 0, 'changed_at', ARGV[2])
return 1
