-- requeue.lua: runs a job again now: a failed or complete job goes back to its
-- queue (or another) with its retries renewed; a scheduled one stops waiting for
-- its due time. A complete job's result goes. The jobs that failed as
-- runtime.DependencyFailed because a failed job failed return to depends with
-- it (lib/deps.lua: Deps.restore); a job that failed so itself runs without
-- the jobs it waits on that failed.
--
-- KEYS[1]  the namespace root
-- ARGV     jid, queue ('' for the job's own)
-- Reply    the job's state (waiting, or depends while it waits on jobs)
-- Errors   NO_SUCH_JOB; WRONG_STATE (running, waiting, depends, or failed as
--          runtime.CorruptJob: its data is lost); BAD_ARG

local jid = ARGV[1]
local queue = ARGV[2] or ''
if queue ~= '' then
  Check.queue('queue', queue)
end
local meta, data = Job.must(jid)
if meta.cr then
  E.raise('WRONG_STATE',
    jid .. ' was failed as runtime.CorruptJob: its record did not decode, it cannot run again')
end
if meta.s ~= FAILED and meta.s ~= COMPLETE and meta.s ~= SCHEDULED then
  E.raise('WRONG_STATE', jid .. ' is ' .. meta.s .. '; only failed, complete or scheduled jobs can run again now')
end
local now_us = Clock.now_us()
local was = meta.s
Place.remove(jid, meta)
if meta.s ~= SCHEDULED then
  meta.m, meta.a, meta.f, meta.lr = meta.r, nil, nil, nil
end
Job.event(jid, meta, Clock.ms(now_us), 'requeued', { q = queue ~= '' and queue or meta.q, fq = meta.q })
meta.q = queue ~= '' and queue or meta.q
meta.o, meta.d = nil, nil
data = Attempt.keep_result(meta, data, nil)
Deps.drop_failed(jid)
Place.enqueue(jid, meta, data, nil, now_us, true)
if was == FAILED then
  Deps.restore(jid, now_us)
end
return meta.s
