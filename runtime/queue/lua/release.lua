-- release.lua: the lease holder gives jobs back unfinished (a master shutting
-- down). They return to the head of their lane with their place and retries
-- kept: a release is not an attempt that failed.
--
-- KEYS[1]  the namespace root
-- ARGV     worker, jid_1, token_1, jid_2, token_2, ...
-- Reply    JSON list, one entry per job: {"jid", "ok": true, "state"} or
--          {"jid", "error": code, "message"}. A repeated release with the same
--          token answers ok and changes nothing.
-- Errors   per job: LEASE_LOST, NO_SUCH_JOB; BAD_ARG for malformed ARGV

local worker = Check.token('worker', ARGV[1], LIMITS.worker_max)
if #ARGV % 2 ~= 1 then
  E.bad('release takes a worker, then pairs of jid and token')
end
local now_us = Clock.now_us()

local function release(jid, token)
  local meta, data = Job.must(jid)
  if Lease.check(jid, meta, worker, token, 'release', now_us) then
    return meta.s
  end
  Place.release(jid, meta, data, worker, now_us)
  return meta.s
end

local out = {}
for i = 2, #ARGV, 2 do
  out[#out + 1] = E.item(ARGV[i], E.attempt(release, ARGV[i], ARGV[i + 1]))
end
return '[' .. table.concat(out, ',') .. ']'
