-- batch_retry.lua: runs a batch's failed jobs again, as requeue.lua does
-- (retries renewed; the jobs failed as runtime.DependencyFailed because of
-- one back to depends). The batch counts them pending again, so on_success
-- may still fire once they complete (lib/batch.lua). Cancelled jobs are gone
-- and cannot run again; nor can jobs failed as runtime.CorruptJob.
--
-- KEYS[1]  the namespace root
-- ARGV     bid, count (1..unfail_max): at most that many jobs
-- Reply    how many jobs run again (integer)
-- Errors   NO_SUCH_JOB (no such batch), BAD_ARG

local bid = Check.token('bid', ARGV[1], LIMITS.jid_max)
local count = Check.int('count', ARGV[2], 1, LIMITS.unfail_max)
if redis.call('EXISTS', K.batch(bid)) == 0 then
  E.raise('NO_SUCH_JOB', 'no batch ' .. bid)
end
local now_us = Clock.now_us()
local moved = 0
for _, jid in ipairs(redis.call('SRANDMEMBER', K.batch_failed(bid), count)) do
  local meta, data = Job.load(jid)
  if meta and meta.s == FAILED and meta.b == bid and not meta.cr then
    Batch.rerun(jid, meta, data, now_us)
    moved = moved + 1
  elseif not (meta and meta.s == FAILED and meta.b == bid) then
    redis.call('SREM', K.batch_failed(bid), jid) -- gone or elsewhere: a stray entry
  end
end
return moved
