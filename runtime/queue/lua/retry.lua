-- retry.lua: the lease holder gives jobs back for another attempt (many in one step).
--
-- KEYS[1]  the namespace root
-- ARGV     worker, then per job: jid, token, group, message, delay_ms, output, usage
--          delay_ms: -1 for the backoff policy: exponential from backoff-min,
--          doubling per retry spent, at most backoff-max, with jitter in its
--          upper half (the job's own backoff, else the queue's, else the
--          deployment's); 0 for now
--          output: "" or the attempt's output tail, kept with the job
--          (lib/attempt.lua)
--          usage: "" or "<cpu_s> <max_rss_mb>" (" c" after: the peak is the
--            child's since it started), what the attempt cost (lib/attempt.lua)
-- A job with no retries left fails instead, with this group and message (and
-- the jobs waiting on it too, as runtime.DependencyFailed: lib/deps.lua).
-- Reply    JSON list, one entry per job: {"jid", "ok": true, "state"} (state:
--          scheduled, waiting or failed) or {"jid", "error": code, "message"}.
--          A repeated retry with the same token answers ok and changes nothing.
-- Errors   per job: LEASE_LOST (also for a job whose record does not decode: it
--          is failed first, as runtime.CorruptJob, lib/job.lua), NO_SUCH_JOB,
--          BAD_ARG; BAD_ARG for malformed ARGV

local worker = Check.token('worker', ARGV[1], LIMITS.worker_max)
if #ARGV % 7 ~= 1 then
  E.bad('retry takes a worker, then groups of jid, token, group, message, delay_ms, output'
    .. ' and usage')
end
local out = Report.retry(worker, ARGV, 2, #ARGV, Clock.now_us())
Stats.flush()
return '[' .. table.concat(out, ',') .. ']'
