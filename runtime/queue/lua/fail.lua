-- fail.lua: the lease holder fails jobs for good, no retry (many in one step).
--
-- KEYS[1]  the namespace root
-- ARGV     worker, then per job: jid, token, group, message, output, usage
--          group: the failure group (an exception's class path);
--          message: text, cut to its last 64 KiB;
--          output: "" or the attempt's output tail, kept with the job
--          (lib/attempt.lua)
--          usage: "" or "<cpu_s> <max_rss_mb>" (" c" after: the peak is the
--            child's since it started), what the attempt cost (lib/attempt.lua)
-- The jobs waiting on a failed job fail too, as runtime.DependencyFailed
-- (lib/deps.lua); clients waiting for it wake (lib/wait.lua).
-- Reply    JSON list, one entry per job: {"jid", "ok": true, "state"} or
--          {"jid", "error": code, "message"}. A repeated fail with the same token
--          answers ok and changes nothing.
-- Errors   per job: LEASE_LOST (also for a job whose record does not decode: it
--          is failed first, as runtime.CorruptJob, lib/job.lua), NO_SUCH_JOB,
--          BAD_ARG; BAD_ARG for malformed ARGV

local worker = Check.token('worker', ARGV[1], LIMITS.worker_max)
if #ARGV % 6 ~= 1 then
  E.bad('fail takes a worker, then groups of jid, token, group, message, output and usage')
end
local out = Report.fail(worker, ARGV, 2, #ARGV, Clock.now_us())
Stats.flush()
return '[' .. table.concat(out, ',') .. ']'
