-- worker_info.lua: a master tells who it is: where it runs and what it serves.
-- Read by workers.lua; kept an hour (a master sends it again at least every
-- 10 minutes, and whenever its concurrency changes).
--
-- KEYS[1]  the namespace root
-- ARGV     worker, info: JSON object {"host": text, "pid": n, "queues": [queue, ...],
--          "concurrency": n, "started_ms": n (optional), "records": n (optional:
--          the record forms its release reads, runtime.queue.job.RECORDS; a
--          master of a release before compact records tells none)}
-- Reply    1
-- Errors   BAD_ARG

local INFO_TTL_S = 3600

local worker = Check.token('worker', ARGV[1], LIMITS.worker_max)
local info = Json.decode('info', ARGV[2] or '')
local host = Check.token('host', info.host, 255)
local pid = Check.int('pid', info.pid, 1, 2 ^ 31)
local concurrency = Check.int('concurrency', info.concurrency, 0, 100000)
local queues = Check.tokens('queues', info.queues, 128, 1000)
for _, queue in ipairs(queues) do
  Check.queue('queues entry', queue)
end
local started_ms = Check.optional(info.started_ms)
if started_ms ~= nil then
  Check.int('started_ms', started_ms, 0, 1e15)
end
local records = Check.optional(info.records)
if records ~= nil then
  Check.int('records', records, 1, 1000)
end
local stored = cjson.encode({ host = host, pid = pid, concurrency = concurrency,
  started_ms = started_ms, records = records })
stored = string.sub(stored, 1, -2) .. ',"queues":' .. Json.array(queues) .. '}'
redis.call('SET', K.worker_info(worker), stored, 'EX', INFO_TTL_S)
redis.call('ZADD', K.workers, Clock.ms(Clock.now_us()), worker)
return 1
