-- domain_pause.lua: pauses a domain (none of its jobs starts, in any queue;
-- they stay throttled, and the other domains of their queues run) or resumes it.
--
-- KEYS[1]  the namespace root
-- ARGV     domain, paused ("1" pause, "0" resume)
-- The domain's limits stay as they are. A pause stops nothing that runs. Its
-- lanes (at most release_batch) are throttled until it resumes; a resume
-- readies them (or throttles them until its limits free it) and wakes the
-- idle masters of their queues.
-- Reply    how many queues were woken (integer)
-- Errors   BAD_ARG

local domain = Check.token('domain', ARGV[1], LIMITS.domain_max)
local paused = ARGV[2]
if paused ~= '0' and paused ~= '1' then
  E.bad('paused must be 0 or 1')
end
local now_us = Clock.now_us()
local rec = Domains.record(domain)
rec.paused = paused == '1' or nil
Domains.write(domain, rec, now_us)
local woken = Lanes.rescore_domain(domain, now_us)
for _, queue in ipairs(woken) do
  Place.nudge(queue)
end
return #woken
