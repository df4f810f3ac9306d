-- cancel.lua: deletes jobs, wherever they are, and leaves a tombstone of each
-- job that had not ended, where memory allows (Place.to_cancelled: state cancelled,
-- when and by what, for the retention window). The holder of a running one is
-- told at once: its jid is published on K.cancels(holder) (a master listening
-- there stops it; else it learns at its next heartbeat that its lease is
-- lost). Clients waiting for one wake (lib/wait.lua) and find its tombstone
-- (or no job, when none was left). Old tombstones past retention go with the
-- call (lib/retention.lua). Runs while Redis is full (allow-oom): it frees.
-- A job of a batch that had not ended counts as failed there (lib/batch.lua).
--
-- KEYS[1]  the namespace root
-- ARGV     by (what cancels: cli, dashboard, api or dependency), jid_1, jid_2, ...
-- Reply    JSON list of the jids that existed and were deleted (a job whose
--          record does not decode too: it is deleted as it is, with what its
--          meta, if sound, says it holds, and leaves no tombstone; data that
--          only Python could not read is dropped with the rest). A job
--          that had ended (complete, failed) is deleted and leaves none
--          either; a tombstone is no job: it is not cancelled again, nor
--          listed in the reply.
-- Errors   DEPENDED_ON when a job outside this call waits on one of them
--          (cancel those too, in the same call); nothing is written then.
--          BAD_ARG for an unknown `by`, or more than cancel_max jids.

local by = ARGV[1]
if not CANCELLED_BY[by] then
  E.bad('by must be one of cli, dashboard, api or dependency, got ' .. Text.escape(tostring(by)))
end
if #ARGV - 1 > LIMITS.cancel_max then
  E.bad('cancel takes at most ' .. LIMITS.cancel_max .. ' jids per call')
end
local doomed, found, sound, cancelled = {}, {}, {}, {}
for i = 2, #ARGV do
  doomed[ARGV[i]] = true
end
for i = 2, #ARGV do
  local jid = ARGV[i]
  local meta, _, _, sound_meta = Job.read(jid) -- nothing is written before the checks pass
  sound[jid] = meta and true or nil
  if meta == false then
    meta = sound_meta or {}
  end
  if meta and meta.s ~= CANCELLED and not found[jid] then
    for _, other in ipairs(redis.call('SMEMBERS', K.dependents(jid))) do
      if not doomed[other] and redis.call('HEXISTS', K.jobs, other) == 1 then
        E.raise('DEPENDED_ON', 'job ' .. other .. ' depends on ' .. jid
          .. '; cancel both together')
      end
    end
    found[jid] = meta
    found[#found + 1] = jid
    cancelled[#cancelled + 1] = jid
  end
end
local now_us = Clock.now_us()
local now_ms = Clock.ms(now_us)
for _, jid in ipairs(found) do
  local meta = found[jid]
  if meta.b then -- counted as failed by its batch (lib/batch.lua, written at the call's end)
    Batch.cancelled(jid, meta, now_us)
  end
end
-- the deletes first: a Redis 6.2 that is full refuses a script's first write
-- that may grow memory (a waiter's token), not the ones after it
Place.to_cancelled(found, sound, by, now_us)
for _, jid in ipairs(found) do
  local meta = found[jid]
  Wait.notify(jid, meta, CANCELLED, now_ms)
  if meta.s == RUNNING and type(meta.w) == 'string' then
    redis.call('PUBLISH', K.cancels(meta.w), jid)
  end
end
Retention.trim_cancelled(now_us, LIMITS.retention_batch)
Stats.flush()
return Json.array(cancelled)
