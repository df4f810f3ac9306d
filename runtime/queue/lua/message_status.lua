-- message_status.lua: a job's state in the vocabulary of a de-duplicating
-- message queue.
--
-- KEYS[1]  the namespace root
-- ARGV     jid
-- Reply    "queued" (waiting, throttled, depends), "queued-with-backoff"
--          (scheduled: delayed or backing off), "locked" (running),
--          "locked-with-requeue" (running, one more run asked for),
--          "done-with-backoff" (complete, its unique key still taken),
--          "done-awaiting-gc" (complete or failed, until retention removes it),
--          or nil (no such job, or its tombstone: cancelled)
--          (a job whose record does not decode answers as the failed job it
--          becomes, lib/job.lua: done-awaiting-gc)
-- Read-only (no-writes): runs while Redis is full, and on replicas.
-- Errors   BAD_ARG

local jid = Check.token('jid', ARGV[1], LIMITS.jid_max)
local meta = Job.view(jid, true) -- as get sees it: data Python cannot read is corrupt
if not meta or meta.s == CANCELLED then
  return nil
end
local s = meta.s
if s == RUNNING then
  return meta.rq and 'locked-with-requeue' or 'locked'
elseif s == SCHEDULED then
  return 'queued-with-backoff'
elseif s == COMPLETE then
  if meta.uk and redis.call('GET', K.unique(meta.uk)) == jid
      and redis.call('PTTL', K.unique(meta.uk)) > 0 then
    return 'done-with-backoff'
  end
  return 'done-awaiting-gc'
elseif s == FAILED then
  return 'done-awaiting-gc'
end
return 'queued'
