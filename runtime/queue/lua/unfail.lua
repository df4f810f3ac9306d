-- unfail.lua: moves failed jobs of a group back to a queue (or each to its
-- own), oldest first, with their retries renewed. The jobs that failed as runtime.DependencyFailed
-- because one of them failed return to depends (lib/deps.lua: Deps.restore);
-- a job that failed so itself runs without the jobs it waits on that failed.
--
-- KEYS[1]  the namespace root
-- ARGV     group, queue ('' for each job's own), count (1..unfail_max)
-- Reply    how many jobs moved. A job whose record does not decode is failed
--          as runtime.CorruptJob instead (lib/job.lua); entries whose job is
--          gone or not failed are dropped.
-- Errors   BAD_ARG; also for the group runtime.CorruptJob: those jobs' data
--          is lost, they cannot run again (read them, then cancel them)

local group = Check.token('group', ARGV[1], LIMITS.group_max)
local queue = ARGV[2] == '' and '' or Check.queue('queue', ARGV[2])
local count = Check.int('count', ARGV[3], 1, LIMITS.unfail_max)
if group == GROUP.CORRUPT_JOB then
  E.bad('jobs failed as runtime.CorruptJob cannot run again: their records did not decode')
end
local now_us = Clock.now_us()
local now_ms = Clock.ms(now_us)
return Place.unfail(group, count, function(jid, meta, data)
  local to = queue ~= '' and queue or meta.q
  Job.event(jid, meta, now_ms, 'unfailed', { q = to, fq = meta.q })
  meta.q, meta.m, meta.a, meta.f, meta.o = to, meta.r, nil, nil, nil
  Deps.drop_failed(jid)
  Place.enqueue(jid, meta, data, nil, now_us, true)
  Deps.restore(jid, now_us)
end)
