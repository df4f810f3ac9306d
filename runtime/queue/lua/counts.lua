-- counts.lua: how many jobs each queue holds, by state. Cheap: counters and
-- cardinalities only.
--
-- KEYS[1]  the namespace root
-- ARGV     queue_1, queue_2, ... (none: every known queue, at most counts_max)
-- Reply    {"<queue>": {"waiting", "throttled", "scheduled", "running",
--          "stalled", "depends", "paused", "size_warning"}, ...}
--          size_warning: the queue's size-warning setting (0: none)
--          running counts live leases; stalled, leases expired but not yet
--          reclaimed by a pop.
-- Errors   BAD_ARG

local queues = ARGV
if #queues == 0 then
  queues = redis.call('ZRANGE', K.queues, 0, LIMITS.counts_max - 1)
end
local now_us = Clock.now_us()
local out = {}
for i, queue in ipairs(queues) do
  Check.queue('queue', queue)
  local c = redis.call('HMGET', K.queue(queue), 'queued', 'throttled', 'paused')
  local queued, throttled = tonumber(c[1]) or 0, tonumber(c[2]) or 0
  local running = redis.call('ZCARD', K.running(queue))
  local stalled = redis.call('ZCOUNT', K.running(queue), '-inf', '(' .. int(now_us))
  out[i] = cjson.encode(queue) .. ':' .. cjson.encode({
    waiting = queued - throttled,
    throttled = throttled,
    scheduled = redis.call('ZCARD', K.scheduled(queue)),
    running = running - stalled,
    stalled = stalled,
    depends = redis.call('SCARD', K.depends(queue)),
    paused = c[3] == '1',
    size_warning = Config.get('size-warning', queue),
  })
end
return '{' .. table.concat(out, ',') .. '}'
