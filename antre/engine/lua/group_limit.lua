-- group_limit: an operator's override of one group's slots (issue 23, live control), or its end.
-- KEYS[1] overrides (HASH group -> '<slots>|<until ms>', read by every reserve-side script:
-- group_limit in _lib.lua)   KEYS[2] override records (HASH group -> JSON {slots, by, reason,
-- at, until_ms}, for the Groups page and the audit trail)
-- ARGV[1] job_prefix   ARGV[2] group   ARGV[3] slots (0 holds the group: none of its waiting
-- jobs gets a slot; '' clears the override)   ARGV[4] until ms (0: until cleared)
-- ARGV[5] the record's JSON   ARGV[6] now_ms
-- A raise gives the freed slots to the group's oldest waiting jobs at once (group_fill: at
-- most 100 per call; the rest as its jobs end or at the next call).
-- Returns: the slots in force now (after a clear: those of the group's jobs).
local prefix, g, now = ARGV[1], ARGV[2], tonumber(ARGV[6])
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], g)
  redis.call('HDEL', KEYS[2], g)
else
  redis.call('HSET', KEYS[1], g, ARGV[3] .. '|' .. ARGV[4])
  redis.call('HSET', KEYS[2], g, ARGV[5])
end
-- a job of the group names its own slots: one holding a slot, else the oldest waiting
local tag = tag_of(prefix)
local one = redis.call('SRANDMEMBER', tag .. 'gheld:' .. g) or
            redis.call('LINDEX', tag .. 'gline:' .. g, -1) or ''
local limit = group_limit(prefix, one, g, now)
group_fill(prefix, g, now, limit)
return limit
