-- queue_forget.lua: forgets an empty queue: it leaves the list of queues with
-- its settings of state (paused), its totals, its statistics and its indexes.
--
-- KEYS[1]  the namespace root
-- ARGV     queue
-- Reply    1 if the queue was known, 0 if not (leftover keys are deleted either way)
--          Empty: no waiting, throttled, scheduled, running, depends or failed
--          job and no recurrence. Its complete jobs and tombstones do not
--          count: they stay until retention deletes them, no longer listed by
--          queue. Per-queue
--          settings in config (<queue>-heartbeat ...) are kept.
-- Errors   WRONG_STATE when the queue is not empty (nothing is written);
--          BAD_ARG

local queue = Check.queue('queue', ARGV[1])
local c = redis.call('HMGET', K.queue(queue), 'queued', 'throttled')
local queued, throttled = tonumber(c[1]) or 0, tonumber(c[2]) or 0
local held = {
  { WAITING, queued - throttled },
  { THROTTLED, throttled },
  { SCHEDULED, redis.call('ZCARD', K.scheduled(queue)) },
  { RUNNING, redis.call('ZCARD', K.running(queue)) },
  { DEPENDS, redis.call('SCARD', K.depends(queue)) },
  { FAILED, redis.call('ZCARD', K.failed_index(queue)) },
  { 'recurring', redis.call('ZCARD', K.recurring(queue)) },
}
local busy = {}
for _, h in ipairs(held) do
  if h[2] > 0 then
    busy[#busy + 1] = int(h[2]) .. ' ' .. h[1]
  end
end
if #busy > 0 then
  E.raise('WRONG_STATE', 'queue ' .. queue .. ' is not empty (' .. table.concat(busy, ', ')
    .. '); cancel, unfail or finish those jobs, and unrecur its recurrences, first')
end

local known = redis.call('ZREM', K.queues, queue)
for _, prio in ipairs(redis.call('ZRANGE', K.prios(queue), 0, -1)) do
  redis.call('DEL', K.ready(queue, prio))
end
redis.call('DEL', K.queue(queue), K.prios(queue), K.throttled(queue), K.scheduled(queue),
  K.running(queue), K.depends(queue), K.complete_index(queue), K.failed_index(queue),
  K.cancelled_index(queue),
  K.idle(queue), K.wake(queue), K.recurring(queue))
Due.forget(queue)
local today = math.floor(Clock.now_us() / 86400000000)
for day = today - LIMITS.stats_days, today + 1 do
  redis.call('DEL', K.stats(queue, day))
end
return known
