-- breaker_failure: a call to the downstream failed. closed: the failure joins the sliding
-- window, and when the window holds threshold failures the breaker opens for cooldown ms.
-- half_open: the probe failed, so the breaker opens again with a new cooldown. open: counted.
-- KEYS[1] breaker (HASH)   KEYS[2] failures (ZSET '<ms>:<seq>' -> ms, same hash tag)
-- ARGV[1] now_ms   ARGV[2] failure threshold   ARGV[3] window ms   ARGV[4] cooldown ms
-- Returns: {state after, failures in the window}
local now, threshold = tonumber(ARGV[1]), tonumber(ARGV[2])
local window, cooldown = tonumber(ARGV[3]), tonumber(ARGV[4])
local state = redis.call('HGET', KEYS[1], 'state') or 'closed'
redis.call('HINCRBY', KEYS[1], 'failures_total', 1)
redis.call('HSET', KEYS[1], 'last_failure_at', now)
local function open()
  redis.call('HSET', KEYS[1], 'state', 'open', 'opened_at', now, 'open_until', now + cooldown,
             'probe', '', 'probe_until', 0, 'changed_at', now)
  redis.call('HINCRBY', KEYS[1], 'opens', 1)
  redis.call('DEL', KEYS[2])
  return {'open', 0}
end
if state == 'half_open' then return open() end
if state == 'open' then return {'open', 0} end
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
redis.call('ZADD', KEYS[2], now, now .. ':' .. seq)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. (now - window + 1))
-- only the newest threshold failures matter: the window never grows past that
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -threshold - 1)
redis.call('PEXPIRE', KEYS[2], window + 60000)
local failures = redis.call('ZCARD', KEYS[2])
if failures >= threshold then return open() end
return {'closed', failures}
