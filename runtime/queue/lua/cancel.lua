-- cancel.lua: deletes jobs, wherever they are. The holder of a running one is
-- told at once: its jid is published on K.cancels(holder) (a master listening
-- there stops it; else it learns at its next heartbeat that its lease is
-- lost). Clients waiting for one wake (lib/wait.lua) and find no job. A job
-- of a batch that had not ended counts as failed there (lib/batch.lua).
--
-- KEYS[1]  the namespace root
-- ARGV     jid_1, jid_2, ...
-- Reply    JSON list of the jids that existed and were deleted (a job whose
--          record does not decode too: it is deleted as it is, with what its
--          meta, if sound, says it holds)
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
  local meta, _, _, sound_meta = Job.read(jid) -- nothing is written before the checks pass
  if meta == false then
    meta = sound_meta or {}
  end
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
local now_us = Clock.now_us()
local now_ms = Clock.ms(now_us)
for _, jid in ipairs(found) do
  local meta = found[jid]
  if meta.b then -- counted as failed by its batch (lib/batch.lua)
    Batch.cancelled(jid, meta, now_us)
  end
  Place.delete(jid, meta)
  Wait.notify(jid, meta, 'cancelled', now_ms)
  if meta.s == RUNNING and type(meta.w) == 'string' then
    redis.call('PUBLISH', K.cancels(meta.w), jid)
  end
  cancelled[#cancelled + 1] = jid
end
return Json.array(cancelled)
