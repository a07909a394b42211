-- reseal: store re-encrypted payloads (keys rotate), each only if unchanged since it was read.
-- KEYS[i] a job   ARGV[2i-1] its payload as read   ARGV[2i] the payload sealed under the
-- newest key version. A job whose payload changed meanwhile (or that is gone) is left as it is.
-- Returns: how many payloads were replaced.
local replaced = 0
for i, job in ipairs(KEYS) do
  if redis.call('HGET', job, 'payload') == ARGV[2 * i - 1] then
    redis.call('HSET', job, 'payload', ARGV[2 * i])
    replaced = replaced + 1
  end
end
return replaced
