-- requeue.lua: runs a job again now: a failed or complete job goes back to its
-- queue (or another) with its retries renewed; a scheduled one stops waiting for
-- its due time.
--
-- KEYS[1]  the namespace root
-- ARGV     jid, queue ('' for the job's own)
-- Reply    the job's state (waiting)
-- Errors   NO_SUCH_JOB; WRONG_STATE (running, waiting, depends); BAD_ARG

local jid = ARGV[1]
local queue = ARGV[2] or ''
if queue ~= '' then
  Check.queue('queue', queue)
end
local meta, data = Job.must(jid)
if meta.s ~= 'failed' and meta.s ~= 'complete' and meta.s ~= 'scheduled' then
  E.raise('WRONG_STATE', jid .. ' is ' .. meta.s .. '; only failed, complete or scheduled jobs can run again now')
end
local now_us = Clock.now_us()
Place.remove(jid, meta)
if meta.s ~= 'scheduled' then
  meta.m, meta.a, meta.f, meta.lr = meta.r, nil, nil, nil
end
Job.event(jid, meta, Clock.ms(now_us), 'requeued', { q = queue ~= '' and queue or meta.q, fq = meta.q })
meta.q = queue ~= '' and queue or meta.q
meta.o, meta.d = nil, nil
Place.enqueue(jid, meta, data, nil, now_us, false)
return meta.s
