-- promote_due: scheduled jobs whose time has come -> ready.
-- KEYS[1] scheduled   KEYS[2] ready   KEYS[3] wake (tokens for idle workers)
-- ARGV[1] job_prefix   ARGV[2] now_ms   ARGV[3] max jobs
-- Each gets a 'due' event (actor 'promoter') on its timeline.
-- A record that is not a hash is promoted all the same (its state left alone): reserve.lua
-- sends it to the DLQ. Returns: number of jobs promoted.
local prefix, now = ARGV[1], tonumber(ARGV[2])
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  redis.pcall('HSET', prefix .. id, 'state', S.ready)
  redis.call('LPUSH', KEYS[2], id)
  tl_add(tl_key(prefix, id), now, 'due', 'promoter', {})
end
wake(KEYS[3], #ids)
return #ids
