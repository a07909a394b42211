-- breaker_allow: may a call to the downstream go ahead? closed -> yes; open -> no until the
-- cooldown has passed, then exactly one caller becomes the probe (state half_open) and the
-- others are held until the probe reports (breaker_success / breaker_failure) or times out.
-- KEYS[1] breaker (HASH state, open_until, probe, probe_until, opened_at, changed_at, ...)
-- ARGV[1] holder (who asks, e.g. '<job id>:<epoch>')   ARGV[2] now_ms
-- ARGV[3] probe timeout ms (a probe that never reports is replaced after this)
-- ARGV[4] hold ms (the longest wait told to callers held behind a probe)
-- Returns: {1|0 allowed, state after ('closed'|'open'|'half_open'), ms to wait (0 if allowed)}
local holder, now = ARGV[1], tonumber(ARGV[2])
local probe_ms, hold_ms = tonumber(ARGV[3]), tonumber(ARGV[4])
local b = redis.call('HMGET', KEYS[1], 'state', 'open_until', 'probe', 'probe_until')
local state = b[1] or 'closed'
if state == 'closed' then return {1, 'closed', 0} end
if state == 'open' then
  local open_until = tonumber(b[2]) or 0
  if now < open_until then return {0, 'open', open_until - now} end
  redis.call('HSET', KEYS[1], 'state', 'half_open', 'probe', holder,
             'probe_until', now + probe_ms, 'changed_at', now)
  redis.call('HINCRBY', KEYS[1], 'probes', 1)
  return {1, 'half_open', 0}
end
-- half_open: one probe at a time
local probe, probe_until = b[3] or '', tonumber(b[4]) or 0
if probe == holder and now < probe_until then return {1, 'half_open', 0} end
if probe == '' or now >= probe_until then
  redis.call('HSET', KEYS[1], 'probe', holder, 'probe_until', now + probe_ms)
  redis.call('HINCRBY', KEYS[1], 'probes', 1)
  return {1, 'half_open', 0}
end
return {0, 'half_open', math.max(1, math.min(probe_until - now, hold_ms))}
