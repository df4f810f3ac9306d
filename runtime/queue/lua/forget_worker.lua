-- forget_worker.lua: a master leaving says goodbye. It drops out of the workers
-- list and stops waiting on its queues; jobs handed to it that it never took
-- go back to their queues (not counted as attempts). Its other leases, if any
-- are left, expire on their own.
--
-- KEYS[1]  the namespace root
-- ARGV     worker, queue_1, queue_2, ... (the queues it served)
-- Reply    the number of jobs it still held
--          Anything on its handoff list that is not a job's reply is dropped.
-- Errors   BAD_ARG

local worker = Check.token('worker', ARGV[1], LIMITS.worker_max)
local queues = {}
for i = 2, #ARGV do
  queues[#queues + 1] = Check.queue('queue', ARGV[i])
end
local now_us = Clock.now_us()
Handoff.withdraw(worker, queues)
for _, reply in ipairs(Handoff.collect(worker)) do
  local handed = cjson.decode(reply) -- checked by Handoff.collect
  local jid, token = handed.jid, handed.meta.l
  E.attempt(function()
    local meta, data = Job.must(jid)
    if not Lease.check(jid, meta, worker, token, 'release', now_us) then
      Place.release(jid, meta, data, worker, now_us)
    end
  end)
end
local held = redis.call('SCARD', K.worker_jobs(worker))
Lease.unseen(worker)
if held == 0 then
  redis.call('DEL', K.worker_jobs(worker))
end
return held
