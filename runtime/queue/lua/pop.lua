-- pop.lua: leases up to `count` jobs from one or more queues in one step.
--
-- KEYS[1]  the namespace root
-- ARGV     worker, count, seed, order, ahead_us, idle, queue_1, queue_2, ...
--          worker  the caller's worker id ("host-pid")
--          count   most jobs to lease, 0..pop_max
--          seed    random text from the caller; lease tokens derive from it
--          order   "ordered": drain queue_1, then queue_2 ...;
--                  "round-robin": one job from each queue in turn (the caller
--                  rotates the list between calls)
--          ahead_us  0..ahead_max_us: with room left, also lease jobs whose turn
--                  comes within this many us (a scheduled job due then, a
--                  throttled domain's next start); each carries start_in_us and
--                  the caller starts it then, not before. Masters pop a little
--                  ahead of what they wait for, so such jobs start on time.
--          idle    1: the caller is a master that will wait for work when this
--                  pop comes back short (see below); 0: any other caller
-- Before taking, each served queue (paused ones are skipped) reclaims jobs
-- whose lease expired (not those post-outage grace holds: lib/lease.lua),
-- promotes due scheduled jobs and frees throttled lanes. A job whose record
-- does not decode, met on the way, is failed (runtime.CorruptJob) and taken
-- out of its lane, and the pop goes on with the jobs behind it (lib/job.lua).
-- So is a job past its expires_in deadline (failed as runtime.Expired, never
-- leased). A domain's concurrency cap and pause hold its jobs (lib/domains.lua).
-- Reply    {"jobs": [job, ...], "wake_in_ms": n, "refill": [recurrence, ...]}
--          job: as Lease.hand replies it (lease.lua), with the lease in meta (w,
--          l); jobs handed to this worker while it waited (handoff.lua) come
--          first, marked "handed";
--          wake_in_ms: in how many ms (to the microsecond) something next
--          comes due in these queues (a scheduled job, a throttled domain, a
--          lease expiry or the end of its post-outage grace), -1 for never
--          or for a pop that got all it asked for (count 0 only asks this);
--          0 when a queue still has ready jobs but this pop set aside its
--          pop_skips lanes, or dropped drop_batch corrupt entries (lanes.lua):
--          ask again at once;
--          refill: cron recurrences low on ticks, {id, cron, tz, after (ms)}: the
--          caller computes more with croniter (recur_ticks.lua);
--          now_us: Redis's clock when the pop ran (expires_us is on it)
-- A master's (idle 1) pop that comes back short with count > 0 registers it as idle on
-- its (unpaused) queues: jobs that become ready are handed to it (handoff.lua)
-- until its next pop, which withdraws that first.
-- Due recurrences of the served queues spawn their jobs first (lib/recur.lua).
-- Errors   BAD_ARG

local p = Pop.args(ARGV, 1, #ARGV)
local reply = Pop.run(p, Clock.now_us(), LIMITS.retention_pop_batch)
Stats.flush()
return reply
