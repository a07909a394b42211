-- Producers waiting for a job's end.
-- Part of the scripts' shared library (_lib.lua lists the parts in order).

-- == Producers waiting for a job's end ================================================
-- A producer waiting for a job (result_wait.lua) counts itself in the job's field 'waiters';
-- the script that ends the job (ack_job, bury_job, cancel_end's discard, purge.lua) pushes
-- that many tokens to the job's LIST '<tag>:rwake:<id>' (keys.QueueKeys.result_wake), which
-- expires RESULT_WAKE_MS later, and clears the count. A job nobody waits for pays nothing:
-- the field comes with the read the ending script already does.
local RESULT_WAKE_MS = 60000

local function result_wake(job_prefix, id, n)
  n = num_of(n, 0)
  if n <= 0 then return end
  local wk = tag_of(job_prefix) .. K.result_wake .. id
  local left = math.min(n, 100000)
  while left > 0 do
    local tokens = {}
    for i = 1, math.min(left, 1000) do tokens[i] = '1' end
    redis.pcall('LPUSH', wk, unpack(tokens))  -- (pcall: a key of another type loses the wake)
    left = left - #tokens
  end
  redis.pcall('PEXPIRE', wk, RESULT_WAKE_MS)
  redis.pcall('HDEL', job_prefix .. id, 'waiters')
end
