-- depends.lua: adds or removes dependencies of a job that has not run yet.
--
-- KEYS[1]  the namespace root
-- ARGV     jid, "on" | "off", dep_1, dep_2, ...
--          on: the job waits on these too (those already complete are ignored);
--              a waiting or scheduled job moves to depends; waiting on a job
--              that failed for good fails it at once (runtime.DependencyFailed)
--          off: it no longer waits on them; with none left it moves on
--              (scheduled if its due time lies ahead, else waiting)
-- Reply    the job's state
-- Errors   NO_SUCH_JOB; WRONG_STATE (running, complete or failed, a job whose
--          record does not decode too: failed first, lib/job.lua); BAD_ARG (unknown
--          or self dependency, a cycle, a bad verb); nothing written then

local jid, verb = ARGV[1], ARGV[2]
if verb ~= 'on' and verb ~= 'off' then
  E.bad('depends takes "on" or "off", got ' .. tostring(verb))
end
local deps = {}
for i = 3, #ARGV do
  deps[#deps + 1] = Check.token('dependency', ARGV[i], LIMITS.jid_max)
end
if #deps > LIMITS.depends_max then
  E.bad('at most ' .. LIMITS.depends_max .. ' dependencies per call')
end
local meta, data = Job.must(jid)
if meta.s ~= WAITING and meta.s ~= SCHEDULED and meta.s ~= DEPENDS then
  E.raise('WRONG_STATE', jid .. ' is ' .. meta.s .. '; only jobs that have not run take dependencies')
end
local now_us = Clock.now_us()
if verb == 'on' then
  Deps.check(jid, deps)
  if Deps.add(jid, deps) > 0 and meta.s ~= DEPENDS then
    local due = meta.s == SCHEDULED and meta.d or nil
    Place.remove(jid, meta)
    Place.to_depends(jid, meta, due, Clock.ms(now_us))
  end
  if Deps.fail_if_doomed(jid, meta, data, now_us) then
    return meta.s
  end
else
  Deps.remove(jid, deps)
  if meta.s == DEPENDS and redis.call('SCARD', K.deps(jid)) == 0 then
    Place.remove(jid, meta)
    Place.enqueue(jid, meta, data, meta.d, now_us, false)
    return meta.s
  end
end
Job.save(jid, meta, data)
return meta.s
