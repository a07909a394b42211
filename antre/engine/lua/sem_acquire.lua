-- sem_acquire: take (or renew) a slot of a counting semaphore whose slots expire on their own.
-- Slots are ZSET members (the holder, e.g. '<job id>:<epoch>') scored by their expiry ms, so
-- the slot of a worker that died frees itself when its lease would have ended.
-- KEYS[1] semaphore (ZSET holder -> expiry ms)
-- ARGV[1] holder   ARGV[2] expires_at_ms   ARGV[3] now_ms   ARGV[4] limit
-- ARGV[5] '1' renew only (never takes a new slot), '0' acquire
-- Returns: {1, slots in use} taken/renewed (re-acquiring a held slot moves its expiry);
--          {0, slots in use, ms until the soonest slot expires} over the limit or not held.
local holder, expires, now, limit = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. now)
local held = redis.call('ZSCORE', KEYS[1], holder)
local count = redis.call('ZCARD', KEYS[1])
if not held and (ARGV[5] == '1' or count >= limit) then
  local soonest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  local wait = 0
  if soonest[2] then wait = math.max(0, tonumber(soonest[2]) - now) end
  return {0, count, wait}
end
redis.call('ZADD', KEYS[1], expires, holder)
if not held then count = count + 1 end
-- the whole key goes once every slot is long expired (relative TTL: now_ms may be simulated)
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', KEYS[1], math.max(0, tonumber(last[2]) - now) + 3600000)
return {1, count}
