-- group_limit: an operator's override of one group's slots and/or rate (live
-- control), or its end.
-- KEYS[1] overrides (HASH group -> '<slots>|<until ms>|<n>/<window ms>', either limit '' when
-- not overridden; read by every script that gives a slot or a start: group_override in
-- _lib.lua)   KEYS[2] override records (HASH group -> JSON {slots, rate, by, reason, at,
-- until_ms}, for the Groups page)
-- ARGV[1] job_prefix   ARGV[2] group   ARGV[3] the override's value ('' clears it; slots 0
-- holds the group: none of its waiting jobs gets a slot)   ARGV[4] the record's JSON
-- ARGV[5] now_ms
-- The starts the group's rate gave ahead are given again under its rate now (rate_regive), and
-- a raise gives the freed slots to the group's oldest waiting jobs at once (group_fill: at
-- most 100 per call; the rest as its jobs end or at the next call).
-- Returns: the slots in force now (after a clear: those of the group's jobs).
local prefix, g, now = ARGV[1], ARGV[2], tonumber(ARGV[5])
-- the operators' records of another type: refused with nothing written; the group's own
-- records are read through guard
local refused = wrong_type({KEYS[1], 'hash', KEYS[2], 'hash'})
if refused then return refused end
guard_group(tag_of(prefix), g, now)
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], g)
  redis.call('HDEL', KEYS[2], g)
else
  redis.call('HSET', KEYS[1], g, ARGV[3])
  redis.call('HSET', KEYS[2], g, ARGV[4])
end
-- a job of the group names its own slots and rate: one holding a slot, else the oldest waiting
local tag = tag_of(prefix)
local one = redis.call('SRANDMEMBER', tag .. K.group_held .. g) or
            redis.call('LINDEX', tag .. K.group_line .. g, -1) or ''
rate_regive(prefix, g, now)
local limit = group_limit(prefix, one, g, now)
group_fill(prefix, g, now, limit)
return limit
