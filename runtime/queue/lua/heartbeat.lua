-- heartbeat.lua: renews many leases of one worker in one step.
--
-- KEYS[1]  the namespace root
-- ARGV     worker, jid_1, token_1, jid_2, token_2, ...
-- Reply    {"renewed": [jid, ...], "lost": [jid, ...]}
--          lost: no longer leased to this worker with that token (expired,
--          reclaimed, cancelled, or failed as corrupt); its job must be
--          stopped. A lease that expired during an outage is still renewed
--          while post-outage grace holds it (resumed.lua). Renewal touches only
--          the lease expiry, never the job record; a call that renews nothing
--          writes nothing (but for a corrupt record, failed: lib/job.lua).
-- Errors   BAD_ARG

local worker = Check.token('worker', ARGV[1], LIMITS.worker_max)
if #ARGV % 2 ~= 1 then
  E.bad('heartbeat takes a worker, then pairs of jid and token')
end
local now_us = Clock.now_us()

local renewed, lost = {}, {}
for i = 2, #ARGV, 2 do
  local jid, token = ARGV[i], ARGV[i + 1]
  local meta = Job.load(jid)
  if meta and meta.s == RUNNING and meta.w == worker and meta.l == token
      and Lease.live(jid, meta, now_us) then
    Lease.renew(jid, meta, now_us)
    renewed[#renewed + 1] = jid
  else
    if meta and meta.cr then
      Lease.forget_corrupt(jid, worker)
    end
    lost[#lost + 1] = jid
  end
end
if #renewed > 0 then
  Lease.seen(worker, Clock.ms(now_us)) -- at most once a second
end
return '{"renewed":' .. Json.array(renewed) .. ',"lost":' .. Json.array(lost) .. '}'
