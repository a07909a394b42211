-- partitions_grow: publish a queue's partition count, only ever growing it.
-- KEYS[1] the queue's partition count (QueueKeys.partition_count, partition 0's slot)
-- ARGV[1] the count this process is configured with (1..MAX_PARTITIONS, checked by the caller)
-- ARGV[2] MAX_PARTITIONS
-- A smaller count leaves the published one as it is: partitions are never taken away, so no
-- job is stranded in one that workers would stop reading. A published value that is no count
-- (not a string, not a whole number from 1 to MAX_PARTITIONS) is left as it is, refused.
-- Returns: the count in force (the larger of the two), or {'BAD', what was found}.
local raw = redis.pcall('GET', KEYS[1])
if type(raw) == 'table' then return {'BAD', 'not a string'} end
local now = 1
if raw then
  now = string.match(raw, '^%d+$') and tonumber(raw) or nil
  if not now or now < 1 or now > tonumber(ARGV[2]) then
    return {'BAD', "'" .. string.gsub(string.sub(raw, 1, 30), '[^\32-\126]', '?') .. "'"}
  end
end
local want = tonumber(ARGV[1])
if want > now then
  redis.call('SET', KEYS[1], want)
  return want
end
return now
