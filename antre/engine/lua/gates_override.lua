-- gates_override: an operator's override of one job type's or downstream's limits in this queue
--, or its end.
-- KEYS[1] overrides (HASH gate -> '<slots>|<until ms>|<n>/<window ms>', read by reserve:
-- gate_limits in _gates.lua)   KEYS[2] override records (HASH gate -> JSON {slots, rate, by,
-- reason, at, until_ms}, for the Limits page)
-- ARGV[1] job_prefix   ARGV[2] gate ('type:<t>' or 'ds:<name>')   ARGV[3] the override's value
-- ('' clears it)   ARGV[4] the record's JSON   ARGV[5] now_ms
-- A raise (or a clear) starts the gate's waiting jobs at once (gate_regate, at most 100 per
-- gate per call; the rest as jobs end). Returns: how many it started.
local prefix, gate, now = ARGV[1], ARGV[2], tonumber(ARGV[5])
-- the overrides' records of another type: refused with nothing written (KEYS[1] through guard)
local refused = wrong_type({KEYS[2], 'hash'})
if refused then return refused end
guard(tag_of(prefix), KEYS[1], R.gate_overrides, now)
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], gate)
  redis.call('HDEL', KEYS[2], gate)
else
  redis.call('HSET', KEYS[1], gate, ARGV[3])
  redis.call('HSET', KEYS[2], gate, ARGV[4])
end
return gate_regate(prefix, now)
