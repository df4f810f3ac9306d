-- cancel.lua: deletes jobs, wherever they are (a running job's holder learns
-- at its next heartbeat that its lease is lost).
--
-- KEYS[1]  the namespace root
-- ARGV     jid_1, jid_2, ...
-- Reply    JSON list of the jids that existed and were deleted
-- Errors   DEPENDED_ON when a job outside this call waits on one of them
--          (cancel those too, in the same call); nothing is written then.
--          BAD_ARG for more than cancel_max jids.

if #ARGV > LIMITS.cancel_max then
  E.bad('cancel takes at most ' .. LIMITS.cancel_max .. ' jids per call')
end
local doomed, found = {}, {}
for _, jid in ipairs(ARGV) do
  doomed[jid] = true
end
for _, jid in ipairs(ARGV) do
  local meta = Job.load(jid)
  if meta and not found[jid] then
    for _, other in ipairs(redis.call('SMEMBERS', K.dependents(jid))) do
      if not doomed[other] and redis.call('HEXISTS', K.jobs, other) == 1 then
        E.raise('DEPENDED_ON', 'job ' .. other .. ' depends on ' .. jid
          .. '; cancel both together')
      end
    end
    found[jid] = meta
    found[#found + 1] = jid
  end
end
local cancelled = {}
for _, jid in ipairs(found) do
  Place.delete(jid, found[jid])
  cancelled[#cancelled + 1] = jid
end
return Json.array(cancelled)
