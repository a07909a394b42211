-- breaker_success: a call to the downstream succeeded. half_open: the probe succeeded, so the
-- breaker closes and its failure window starts empty. closed/open: only counted (a success that
-- started before the breaker opened does not close it; the probe decides).
-- KEYS[1] breaker (HASH)   KEYS[2] failures (ZSET, same hash tag)
-- ARGV[1] now_ms
-- Returns: state after ('closed'|'open'|'half_open')
local now = tonumber(ARGV[1])
local state = redis.call('HGET', KEYS[1], 'state') or 'closed'
redis.call('HINCRBY', KEYS[1], 'successes_total', 1)
if state == 'half_open' then
  redis.call('HSET', KEYS[1], 'state', 'closed', 'probe', '', 'probe_until', 0,
             'open_until', 0, 'changed_at', now)
  redis.call('DEL', KEYS[2])
  return 'closed'
end
return state
