-- unpark: a resumed job type's parked jobs -> the oldest end of ready, in their order.
-- KEYS[1] parked list of the type   KEYS[2] ready   KEYS[3] wake   KEYS[4] paused (HASH)
-- KEYS[5] parked types (SET)
-- ARGV[1] job type   ARGV[2] max jobs moved by this call
-- Returns: {ids moved, jobs among them (not purge marks)}; {-1, 0} when the type is paused
-- (again): nothing moved.
-- Bounded: the caller repeats until it gets fewer than ARGV[2] back.
local jtype, limit = ARGV[1], tonumber(ARGV[2])
if redis.call('HEXISTS', KEYS[4], jtype) == 1 then return {-1, 0} end
-- LPOP takes the newest parked first; each RPUSH puts it behind the older ones, so the oldest
-- parked job ends at the very end of ready (the next reserved)
local ids = redis.call('LPOP', KEYS[1], limit)
if not ids then
  redis.call('SREM', KEYS[5], jtype)
  return {0, 0}
end
redis.call('RPUSH', KEYS[2], unpack(ids))
if redis.call('LLEN', KEYS[1]) == 0 then redis.call('SREM', KEYS[5], jtype) end
local jobs = 0
for _, id in ipairs(ids) do
  if string.byte(id, 1) ~= 123 then jobs = jobs + 1 end
end
wake(KEYS[3], jobs)
return {#ids, jobs}
