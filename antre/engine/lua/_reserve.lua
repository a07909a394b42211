-- What reserve returns per job: its read and write layouts.
-- Part of the scripts' shared library (_lib.lua lists the parts in order).

-- == What reserve returns per job =================================================================
-- reserve.lua returns, for each job, the values of RESERVE_FIELDS in that order (the list is
-- antre/engine/envelope.py's RESERVE_FIELDS, written in here by scripts.py). reserve_layout
-- turns a field list into what reserve reads and writes per job: one read (HMGET) of PLAIN,
-- the fields every job has (envelope.PLAIN_FIELDS: what a standard enqueue stores besides
-- 'state'; the id is the one the job was popped by, not read), and the hash's field count
-- (HLEN). When the count is the fields found plus one (its state) the job has no other field:
-- none of the others is asked for. Such a plain job under the default layout (fast) gets its
-- first lease with constant values and a row of PLAIN_FIELDS, its id and reserved_at (the
-- client makes the lease's other values: envelope.from_row, and knows the job was reserved
-- plain: its ack skips the lookups of what a plain job cannot have, ack_job). Any other job
-- (one delivered before, with a lock key, a flow, a cancel request, a trace of its own, a
-- damaged counter, or written by another version) gets a second read (HMGET of EXTRA) and a
-- whole row (a plain job's read asks for 6 names, not 22). The fields reserve writes
-- (WRITTEN) are not returned as read: the reply carries the values written. RESERVE_DEFAULT is
-- made when the library is loaded (with Redis Functions: once per server), not on every
-- reserve. Its tables are read only.
local RESERVE_FIELDS = {--[[RESERVE_FIELDS]]}
local PLAIN_FIELDS = {--[[PLAIN_FIELDS]]}

local function reserve_layout(names)
  -- (epoch and deliveries: read with EXTRA for the new lease's values; their places in the
  -- row are written ones, always returned)
  -- (id: the one the job was popped by; a hash's own is not read, and the standard enqueue
  -- stores none)
  local WRITTEN = {state = true, deadline = true, reserved_at = true, worker_id = true,
                   deliveries = true, epoch = true, id = true}
  local PLAIN = {}
  for i = 1, #PLAIN_FIELDS do PLAIN[PLAIN_FIELDS[i]] = true end
  local core, cpos, extra, epos, pos = {}, {}, {}, {}, {}
  local nret = #names
  for p = 1, nret do  -- (no ipairs: this runs when the library loads, where Redis Functions
    local name = names[p]  -- give the top level only the language itself)
    if PLAIN[name] then
      core[#core + 1] = name; cpos[#core] = p
    elseif not WRITTEN[name] then
      extra[#extra + 1] = name; epos[#extra] = p
    end
    pos[name] = pos[name] or p
  end
  local ncore, nextra = #core, #extra
  local function index_of(list, name)
    for i = 1, #list do if list[i] == name then return i end end
    list[#list + 1] = name  -- the script's own need, not returned
    return #list
  end
  -- every PLAIN field is read (else a plain job's unread field would count as another: no job
  -- would be plain)
  for i = 1, #PLAIN_FIELDS do index_of(core, PLAIN_FIELDS[i]) end
  -- identity: the first read is the row's first positions, nothing else (Queue's RESERVE_FIELDS)
  local identity = #core == ncore
  for i = 1, ncore do if cpos[i] ~= i then identity = false; break end end
  -- tail: EXTRA's asked fields are the row's last positions (Queue's RESERVE_FIELDS): a plain
  -- job's row stops before them
  local tail = nextra > 0
  for i = 1, nextra do if epos[i] ~= nret - nextra + i then tail = false; break end end
  local L = {core = core, cpos = cpos, extra = extra, epos = epos, nret = nret,
             ncore = ncore, nextra = nextra, identity = identity, tail = tail,
             p_id = pos.id, p_epoch = pos.epoch, p_deliveries = pos.deliveries,
             p_state = pos.state, p_deadline = pos.deadline, p_reserved_at = pos.reserved_at,
             p_worker = pos.worker_id}
  L.c_type, L.nread = index_of(core, 'type'), #core
  L.e_vt, L.e_ep, L.e_cancel = index_of(extra, 'vt_ms'), index_of(extra, 'epoch'), index_of(extra, 'cancel')
  L.e_dl = index_of(extra, 'deliveries')
  return L
end

local RESERVE_DEFAULT = reserve_layout(RESERVE_FIELDS)
-- fast: the layout's plain rows are PLAIN_FIELDS (the first read, as read), the id and
-- reserved_at (envelope.PLAIN_ROW)
RESERVE_DEFAULT.fast = RESERVE_DEFAULT.identity and #RESERVE_DEFAULT.core == #PLAIN_FIELDS
                       and RESERVE_DEFAULT.p_id == #PLAIN_FIELDS + 1
