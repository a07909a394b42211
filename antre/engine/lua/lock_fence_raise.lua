-- lock_fence_raise: make the next acquire's fencing token exceed ARGV[1] (after the fence
-- counters were lost, e.g. a flushed Redis, while SQL remembers higher tokens). Never lowers.
-- KEYS[1] fence counter   ARGV[1] the highest token known elsewhere
-- Returns: the counter after the call.
local floor = tonumber(ARGV[1])
local cur = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if cur < floor then
  redis.call('SET', KEYS[1], floor)
  return floor
end
return cur
