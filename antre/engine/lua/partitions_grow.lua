-- partitions_grow: publish a queue's partition count, only ever growing it (issue 29).
-- KEYS[1] the queue's partition count (QueueKeys.partition_count, partition 0's slot)
-- ARGV[1] the count this process is configured with (1..MAX_PARTITIONS, checked by the caller)
-- A smaller count leaves the published one as it is: partitions are never taken away, so no
-- job is stranded in one that workers would stop reading.
-- Returns: the count in force (the larger of the two).
local now = tonumber(redis.call('GET', KEYS[1]) or '1')
local want = tonumber(ARGV[1])
if want > now then
  redis.call('SET', KEYS[1], want)
  return want
end
return now
