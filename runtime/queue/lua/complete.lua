-- complete.lua: the lease holder reports jobs done (many in one step).
--
-- KEYS[1]  the namespace root
-- ARGV     worker, then per job: jid, token, options, result, output, usage
--          options: JSON object, {} or any of
--            "next": queue, "delay_ms": n, "depends": [jid]  with next, the job
--                moves on to that queue (retries renewed) instead of completing;
--                delay and depends only go with next
--            "puts": [[spec JSON, data JSON], ...]  jobs to put with the
--                completion (put.lua's pairs; at most puts_max), in this same
--                step: all of them or none
--            "note": text  for the job's history (e.g. why no result was sent)
--          result: "" or JSON text, the job's return value ("null" is none);
--            stored (lib/attempt.lua) when the job completes, if it decodes
--            and is at most result-max-bytes; else it completes without one
--            and its history says why. A job that moves on (next, or once more
--            for requeue_if_running) keeps none
--          output: "" or the attempt's output tail (kept: its last
--            output_max_bytes), kept with the job as its last attempt's
--          usage: "" or "<cpu_s> <max_rss_mb>" (" c" after: the peak is the
--            child's since it started), what the attempt cost (lib/attempt.lua)
-- Reply    JSON list, one entry per job, in order:
--          {"jid", "ok": true, "state"} or {"jid", "error": code, "message"}
--          A completion repeated with the same token answers ok, changes
--          nothing (and puts nothing again).
--          A put that is refused (a bad spec, a jid taken, an unknown
--          dependency ...) fails the job for good instead, as
--          runtime.PutRefused with the reason: nothing it put, no result
--          (state "failed"; its output is kept). Retrying would refuse it again.
--          A call that completed a job also deletes completed jobs past
--          retention (lib/retention.lua); one that completed none changes nothing.
-- Errors   per job: LEASE_LOST, NO_SUCH_JOB, BAD_ARG (that job unchanged; but a
--          job whose record does not decode is failed first, as
--          runtime.CorruptJob, and answers LEASE_LOST: lib/job.lua);
--          BAD_ARG for the whole call when ARGV is malformed

local worker = Check.token('worker', ARGV[1], LIMITS.worker_max)
if #ARGV % 6 ~= 1 then
  E.bad('complete takes a worker, then groups of jid, token, options, result, output and usage')
end
local now_us = Clock.now_us()
local completed = {} -- K.completed's new entries (time us, jid, ...): one ZADD at the end
local out = Report.complete(worker, ARGV, 2, #ARGV, now_us, completed)
if Place.list_completed(completed) then
  Retention.trim(now_us, LIMITS.retention_batch)
end
Stats.flush()
return '[' .. table.concat(out, ',') .. ']'
