-- release.lua: the lease holder gives jobs back unfinished (a master shutting
-- down, a job stopped because its lease could not be renewed, one leased ahead
-- and never started). They return to the head of their lane with their place
-- and retries kept: a release is not an attempt that failed.
--
-- KEYS[1]  the namespace root
-- ARGV     worker, jid_1, token_1, started_1, jid_2, token_2, started_2, ...
--          started  1: the job had started running (its attempt stays counted,
--                   so every run has its own attempt number); 0: it never
--                   started (the attempt is not counted)
-- Reply    JSON list, one entry per job: {"jid", "ok": true, "state"} or
--          {"jid", "error": code, "message"}. A repeated release with the same
--          token answers ok and changes nothing.
-- Errors   per job: LEASE_LOST (also for a job whose record does not decode: it
--          is failed first, as runtime.CorruptJob, lib/job.lua), NO_SUCH_JOB;
--          BAD_ARG for malformed ARGV

local worker = Check.token('worker', ARGV[1], LIMITS.worker_max)
if #ARGV % 3 ~= 1 then
  E.bad('release takes a worker, then triples of jid, token and started (0 or 1)')
end
local now_us = Clock.now_us()

local function release(jid, token, started)
  local meta, data = Job.must(jid)
  if Lease.check(jid, meta, worker, token, 'release', now_us) then
    return meta.s
  end
  Place.release(jid, meta, data, worker, now_us, started == 1)
  return meta.s
end

local out = {}
for i = 2, #ARGV, 3 do
  local started = Check.int('started', ARGV[i + 2], 0, 1)
  out[#out + 1] = E.item(ARGV[i], E.attempt(release, ARGV[i], ARGV[i + 1], started))
end
return '[' .. table.concat(out, ',') .. ']'
