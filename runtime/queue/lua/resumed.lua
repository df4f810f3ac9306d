-- resumed.lua: a master reached Redis again after an outage, and says so
-- before it reports anything: the leases that ran out while it could not renew
-- them stay its own for one more lease length (post-outage grace,
-- lib/lease.lua), so it can renew them and report the jobs it finished
-- meanwhile, and no other master runs them again.
--
-- KEYS[1]  the namespace root
-- ARGV     worker, outage_ms
--          worker     the caller's worker id ("host-pid")
--          outage_ms  how long the caller could not reach Redis (ms, > 0, at
--                     most outage_max_ms): the outage began at now - outage_ms
-- Sent in the same pipeline as, and right before, the master's first renewal
-- or report after the outage. It opens a grace window on the namespace
-- (K.grace) from the outage's start: while it lasts, a lease of queue q that
-- expired after that start is not reclaimed by pops and is still held by its
-- holder (heartbeat renews it; complete, fail, retry and release with its
-- token are accepted) until the report time + q's heartbeat; a lease that
-- expired before the outage began is reclaimed as usual. Another master
-- reporting the same outage (it began before the window's last report) widens
-- the window: the earliest start, the latest report. A new outage while one's
-- grace lasts keeps both. The window (the key) is gone once the longest
-- heartbeat in the deployment has passed since the last report; until then
-- pops that meet an expired lease read it once per call, and nothing else does.
-- Reply    {"from_us": n, "until_us": n, "now_us": n} (Redis time, us): the
--          window's start, when it is over at the latest, and now
-- Errors   BAD_ARG; nothing is written then

local worker = Check.token('worker', ARGV[1], LIMITS.worker_max)
local outage_ms = Check.int('outage_ms', ARGV[2], 1, LIMITS.outage_max_ms)

local now_us = Clock.now_us()
local from_us, until_us = Grace.open(worker, now_us - outage_ms * 1000, now_us)
return '{"from_us":' .. int(from_us) .. ',"until_us":' .. int(until_us) .. ',"now_us":'
  .. int(now_us) .. '}'
