-- exchange.lua: a master's exchange in one step: its reports on the jobs it
-- ran (completions, retries, failures), then a pop.
--
-- What one call of complete.lua, retry.lua and fail.lua then one of pop.lua
-- would do, in that order, each report and the pop with the same meaning, but
-- paying once what every call pays: the clock, the config hash, one retention
-- trim, one statistics flush, one end-of-call handoff.
--
-- KEYS[1]  the namespace root
-- ARGV     worker, count, seed, order, ahead_us, idle, completes, retries, fails,
--          then completes groups of jid, token, options, result, output,
--          usage (complete.lua), retries groups of jid, token, group, message,
--          delay_ms, output, usage (retry.lua), fails groups of jid, token,
--          group, message, output, usage (fail.lua), then queue_1, queue_2, ...
--          worker .. idle and the queues: as pop.lua takes them;
--          completes, retries, fails: how many jobs each report carries (0 ..)
-- Reply    JSON {"complete": [entry, ...], "retry": [...], "fail": [...],
--          "pop": the pop's reply (pop.lua)}; entries as the reports reply
--          them: {"jid", "ok": true, "state"} or {"jid", "error": code,
--          "message"}, one per job, in order. A report repeated with the same
--          token answers ok and changes nothing: an exchange whose reply was
--          lost may be sent again (its pop is a new one; the jobs the lost one
--          leased come back when their leases run out).
--          Old completed jobs past retention: this call deletes at most what
--          its complete (when it completed a job) and its pop would have.
-- Errors   per job: as complete.lua, retry.lua and fail.lua (LEASE_LOST, also
--          for a job whose record does not decode: failed first as
--          runtime.CorruptJob; NO_SUCH_JOB; BAD_ARG), never failing the call;
--          BAD_ARG for the whole call when ARGV is malformed (checked before
--          any write)

local completes = Check.int('completes', ARGV[7], 0, #ARGV)
local retries = Check.int('retries', ARGV[8], 0, #ARGV)
local fails = Check.int('fails', ARGV[9], 0, #ARGV)
local first_retry = 10 + 6 * completes
local first_fail = first_retry + 7 * retries
local first_queue = first_fail + 6 * fails
if first_queue > #ARGV + 1 then
  E.bad('exchange has fewer arguments than its ' .. completes .. ' completions, '
    .. retries .. ' retries and ' .. fails .. ' failures take')
end
local p = Pop.args(ARGV, 1, 6)
for i = first_queue, #ARGV do
  p.queues[#p.queues + 1] = Check.queue('queue', ARGV[i])
end

local now_us = Clock.now_us()
local completed = {} -- K.completed's new entries (time us, jid, ...): one ZADD
local done = Report.complete(p.worker, ARGV, 10, first_retry - 1, now_us, completed)
local retried = Report.retry(p.worker, ARGV, first_retry, first_fail - 1, now_us)
local failed = Report.fail(p.worker, ARGV, first_fail, first_queue - 1, now_us)
local trim = LIMITS.retention_pop_batch
if Place.list_completed(completed) then
  trim = trim + LIMITS.retention_batch -- complete.lua's trim, then pop.lua's
end
local popped = Pop.run(p, now_us, trim)
Stats.flush()
return '{"complete":[' .. table.concat(done, ',') .. '],"retry":[' .. table.concat(retried, ',')
  .. '],"fail":[' .. table.concat(failed, ',') .. '],"pop":' .. popped .. '}'
