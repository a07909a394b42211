-- extend_lease: move an in-flight job's deadline, only for the holder of the current lease.
-- KEYS[1] job   KEYS[2] inflight
-- ARGV[1] id   ARGV[2] epoch   ARGV[3] now_ms   ARGV[4] ms
-- ARGV[5] 'from_now' (deadline = now + ms, heartbeats) or 'add' (deadline = max(deadline, now) + ms)
-- ARGV[6] latest allowed deadline (0 = no cap; the max total runtime)
-- Returns: the new deadline as a string, or 'LOST:<why>'.
local id, epoch, now, ms = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local lost = lease_error(KEYS[1], epoch)
if lost then return lost end
local deadline
if ARGV[5] == 'add' then
  local cur = tonumber(redis.call('HGET', KEYS[1], 'deadline') or '0') or 0
  deadline = math.max(cur, now) + ms
else
  deadline = now + ms
end
local cap = tonumber(ARGV[6])
if cap > 0 and deadline > cap then deadline = cap end
redis.call('HSET', KEYS[1], 'deadline', deadline)
redis.call('ZADD', KEYS[2], deadline, id)
return tostring(deadline)
