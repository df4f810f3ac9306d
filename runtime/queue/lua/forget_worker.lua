-- forget_worker.lua: a master leaving says goodbye; it drops out of the
-- workers list (its leases, if any are left, expire on their own).
--
-- KEYS[1]  the namespace root
-- ARGV     worker
-- Reply    the number of jobs it still held
-- Errors   BAD_ARG

local worker = Check.token('worker', ARGV[1], LIMITS.worker_max)
local held = redis.call('SCARD', K.worker_jobs(worker))
redis.call('ZREM', K.workers, worker)
if held == 0 then
  redis.call('DEL', K.worker_jobs(worker))
end
return held
