-- priority.lua: changes a job's priority. A waiting job moves to its new
-- priority's lane, keeping its place in eligible-time order; in other states the
-- priority applies when the job next waits.
--
-- KEYS[1]  the namespace root
-- ARGV     jid, priority
-- Reply    the job's state
-- Errors   NO_SUCH_JOB, BAD_ARG. A job whose record does not decode is failed
--          first (runtime.CorruptJob, lib/job.lua); the change applies to that record.

local jid = ARGV[1]
local priority = Check.int('priority', ARGV[2], LIMITS.priority_min, LIMITS.priority_max)
local meta, data = Job.must(jid)
local now_us = Clock.now_us()
Place.reprioritize(jid, meta, priority, now_us, function()
  Job.event(jid, meta, Clock.ms(now_us), 'priority', { p = priority })
end)
Job.save(jid, meta, data)
return meta.s
