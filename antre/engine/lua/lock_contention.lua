-- lock_contention: the most contended lock keys with their conflicts over the last few minutes,
-- the last hour and all time. Candidates: the ``limit`` keys with most conflicts in the hour and
-- the ``limit`` keys with most conflicts ever; the caller orders and cuts them. The hour's
-- minute buckets are summed into a scratch ZSET that is deleted before returning.
-- KEYS[1] per-key totals ZSET   KEYS[2] scratch ZSET   KEYS[3..] minute buckets, newest first
-- ARGV[1] limit   ARGV[2] how many of the newest buckets make the short window (5)
-- Returns: flat list key, short-window count, hour count, total (counts as strings).
local limit = tonumber(ARGV[1])
local short = tonumber(ARGV[2])
local buckets = {}
for i = 3, #KEYS do buckets[#buckets + 1] = KEYS[i] end
redis.call('ZUNIONSTORE', KEYS[2], #buckets, unpack(buckets))
local seen, order = {}, {}
local function add(list)
  for _, k in ipairs(list) do
    if not seen[k] then seen[k] = true; order[#order + 1] = k end
  end
end
add(redis.call('ZREVRANGE', KEYS[2], 0, limit - 1))
add(redis.call('ZREVRANGE', KEYS[1], 0, limit - 1))
local out = {}
for _, k in ipairs(order) do
  local recent = 0
  for i = 1, math.min(short, #buckets) do
    recent = recent + tonumber(redis.call('ZSCORE', buckets[i], k) or 0)
  end
  out[#out + 1] = k
  out[#out + 1] = tostring(recent)
  out[#out + 1] = tostring(tonumber(redis.call('ZSCORE', KEYS[2], k) or 0))
  out[#out + 1] = tostring(tonumber(redis.call('ZSCORE', KEYS[1], k) or 0))
end
redis.call('DEL', KEYS[2])
return out
