-- extend_lease: move an in-flight job's deadline, only for the holder of the current lease.
-- KEYS[1] job   KEYS[2] inflight
-- ARGV[1] id   ARGV[2] epoch   ARGV[3] now_ms   ARGV[4] ms
-- ARGV[5] 'from_now' (deadline = now + ms; ctx.extend_lease), 'at_least' (deadline =
-- max(deadline, now + ms): heartbeats, which must not undo an operator's extension) or 'add'
-- (deadline = max(deadline, now) + ms: the dashboard's button)
-- ARGV[6] latest allowed deadline for what this call adds (0 = no cap; the max total runtime)
-- KEYS[3] the job's timeline (optional)   ARGV[7] actor ('' = the job's worker)
-- ARGV[8] the caller's event details as JSON (''). The job's 'extended_at' is set to now.
-- A worker's extensions (heartbeat, handler) in a row are one 'extended' event with a count
-- and the first and last time (tl_coalesce in _timeline.lua); an operator's each have their own.
-- Returns: the new deadline as a string, or 'LOST:<why>'.
local id, epoch, now, ms = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local lost = lease_error(KEYS[1], epoch)
if lost then return lost end
-- the delivery's 'reserved' event first, while the hash still has its deadline (_lib.lua)
if KEYS[3] then tl_pending(KEYS[1], KEYS[3], nil) end
local cur = num_field(KEYS[1], 'deadline', 0)
local cap = tonumber(ARGV[6])
local deadline
if ARGV[5] == 'add' then
  deadline = math.max(cur, now) + ms
else
  deadline = now + ms
end
if cap > 0 and deadline > cap then deadline = cap end
if ARGV[5] == 'at_least' and cur > deadline then deadline = cur end
redis.call('HSET', KEYS[1], 'deadline', deadline)
redis.call('ZADD', KEYS[2], deadline, id)
redis.call('HSET', KEYS[1], 'extended_at', now)
if KEYS[3] then
  local by = ({at_least = 'heartbeat', add = 'operator'})[ARGV[5]] or 'handler'
  tl_add(KEYS[3], now, 'extended', actor_of(KEYS[1], ARGV[7]),
         {by = by, ms = ms, deadline = deadline}, ARGV[8])
end
return tostring(deadline)
