-- pause_set: pause or resume a queue ('*') or one job type of it.
-- KEYS[1] paused (HASH target -> JSON {by, at, reason})   KEYS[2] stats (HASH)
-- ARGV[1] target ('*' or a job type)   ARGV[2] 'pause' | 'resume'   ARGV[3] JSON state (pause)
-- Returns: 1 changed, 0 nothing to do (already paused / not paused).
if ARGV[2] == 'pause' then
  if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[3]) == 0 then return 0 end
  redis.call('HINCRBY', KEYS[2], 'pauses', 1)
  return 1
end
return redis.call('HDEL', KEYS[1], ARGV[1])
