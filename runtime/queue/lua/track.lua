-- track.lua: starts or stops tracking a job. A tracked job is listed in
-- K.tracked and publishes its events (put, popped, retried, failed, completed,
-- lease-lost) on the channel K.events.
--
-- KEYS[1]  the namespace root
-- ARGV     jid, "on" | "off"
-- Reply    1 tracked, 0 not
-- Errors   NO_SUCH_JOB, BAD_ARG. A job whose record does not decode is failed
--          first (runtime.CorruptJob, lib/job.lua); the change applies to that record.

local jid, verb = ARGV[1], ARGV[2]
if verb ~= 'on' and verb ~= 'off' then
  E.bad('track takes "on" or "off", got ' .. tostring(verb))
end
local meta, data = Job.must(jid)
if verb == 'on' then
  meta.tr = 1
  redis.call('ZADD', K.tracked, Clock.ms(Clock.now_us()), jid)
else
  meta.tr = nil
  redis.call('ZREM', K.tracked, jid)
end
Job.save(jid, meta, data)
return meta.tr and 1 or 0
