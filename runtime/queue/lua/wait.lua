-- wait.lua: how a job ended, or interest in its end (client.wait, lib/wait.lua).
--
-- KEYS[1]  the namespace root
-- ARGV     jid, for_ms (0..wait_max_ms)
--          for_ms > 0: if the job has not ended, the caller waits this long on
--          K.waited(jid), which the script that ends the job pushes to; 0: only look
-- Reply    {"state": "complete", "result": <its result, null for none>}
--          {"state": "failed", "group": .., "message": ..}
--          {"state": <waiting, running, ...>} when it has not ended
-- Errors   NO_SUCH_JOB (never put, cancelled, or removed by retention);
--          BAD_ARG. A job whose record does not decode is failed first
--          (runtime.CorruptJob, lib/job.lua): it answers failed.

local jid = Check.token('jid', ARGV[1], LIMITS.jid_max)
local for_ms = Check.int('for_ms', ARGV[2], 0, LIMITS.wait_max_ms)
local meta, data = Job.load(jid, true)
if not meta then
  E.raise('NO_SUCH_JOB', 'no job ' .. jid)
end
if meta.s == 'complete' then
  local _, result = Job.split(meta, data)
  return Json.object({ { 'state', '"complete"' }, { 'result', result or 'null' } })
elseif meta.s == 'failed' then
  return cjson.encode({ state = 'failed', group = meta.f.g, message = meta.f.m })
end
if for_ms > 0 then
  Wait.register(meta, Clock.ms(Clock.now_us()), for_ms)
  Job.save(jid, meta, data)
end
return cjson.encode({ state = Job.visible_state(meta) })
