-- fail.lua: the lease holder fails jobs for good, no retry (many in one step).
--
-- KEYS[1]  the namespace root
-- ARGV     worker, then per job: jid, token, group, message
--          group: the failure group (an exception's class path);
--          message: text, cut to its last 64 KiB
-- Reply    JSON list, one entry per job: {"jid", "ok": true, "state"} or
--          {"jid", "error": code, "message"}. A repeated fail with the same token
--          answers ok and changes nothing.
-- Errors   per job: LEASE_LOST, NO_SUCH_JOB, BAD_ARG; BAD_ARG for malformed ARGV

local worker = Check.token('worker', ARGV[1], LIMITS.worker_max)
if #ARGV % 4 ~= 1 then
  E.bad('fail takes a worker, then groups of jid, token, group and message')
end
local now_us = Clock.now_us()

local function fail(jid, token, group, message)
  local meta, data = Job.must(jid)
  if Lease.check(jid, meta, worker, token, 'fail', now_us) then
    return meta.s
  end
  Check.token('group', group, LIMITS.group_max)
  Lease.drop(jid, meta)
  meta.lr = 'fail'
  Stats.count(meta.q, 'failures', now_us)
  Place.fail(jid, meta, group, message, worker, now_us)
  Job.save(jid, meta, data)
  return meta.s
end

local out = {}
for i = 2, #ARGV, 4 do
  out[#out + 1] = E.item(ARGV[i], E.attempt(fail, ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]))
end
Stats.flush()
return '[' .. table.concat(out, ',') .. ']'
