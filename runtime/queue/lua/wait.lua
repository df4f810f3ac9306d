-- wait.lua: how a job ended, or interest in its end (client.wait, lib/wait.lua).
--
-- KEYS[1]  the namespace root
-- ARGV     jid, for_ms (0..wait_max_ms)
--          for_ms > 0: if the job has not ended, the caller waits this long on
--          K.waited(jid), which the script that ends the job pushes to; 0: only look
-- Reply    {"state": "complete", "result": <its result, null for none>}
--          {"state": "failed", "group": .., "message": ..}
--          {"state": "cancelled", "at_ms": .., "by": ..} (its tombstone)
--          {"state": <waiting, running, ...>} when it has not ended
--          plus "jid": the job's jid, when the one asked for names the job a
--          running job's duplicate put was folded into (lib/unique.lua): the
--          caller waits on that job's K.waited
-- Errors   NO_SUCH_JOB (never put, cancelled without a tombstone, or removed
--          by retention);
--          BAD_ARG. A job whose record does not decode is failed first
--          (runtime.CorruptJob, lib/job.lua): it answers failed.

local jid = Check.token('jid', ARGV[1], LIMITS.jid_max)
local for_ms = Check.int('for_ms', ARGV[2], 0, LIMITS.wait_max_ms)
local meta, data = Job.load(jid, true)
local folded -- the jid of the job that `jid` was folded into
if not meta then
  folded = Unique.folded_into(jid)
  if folded then
    jid = folded
    meta, data = Job.load(jid, true)
  end
end
if not meta then
  E.raise('NO_SUCH_JOB', 'no job ' .. jid)
end
local named = folded and { { 'jid', cjson.encode(folded) } } or {}
if meta.s == COMPLETE then
  local _, result = Job.split(meta, data)
  return Json.object({ { 'state', STORED_STATES[COMPLETE] }, { 'result', result or 'null' }, unpack(named) })
elseif meta.s == FAILED then
  return cjson.encode({ state = FAILED, group = meta.f.g, message = meta.f.m, jid = folded })
elseif meta.s == CANCELLED then
  return cjson.encode({ state = CANCELLED, at_ms = meta.cn.t, by = meta.cn.b, jid = folded })
end
if for_ms > 0 then
  Wait.register(meta, Clock.ms(Clock.now_us()), for_ms)
  Job.save(jid, meta, data)
end
return cjson.encode({ state = Job.visible_state(meta), jid = folded })
