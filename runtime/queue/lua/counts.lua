-- counts.lua: how many jobs each queue holds, by state, with its totals. Cheap:
-- counters, cardinalities and one job record per queue (lib/stats.lua).
--
-- KEYS[1]  the namespace root
-- ARGV     queue_1, queue_2, ... (none: every known queue, at most counts_max)
-- Reply    {"<queue>": {"waiting", "throttled", "scheduled", "running",
--          "stalled", "depends", "complete", "failed", "cancelled", "paused",
--          "size_warning",
--          "completed_total", "failed_total", "retried_total",
--          "oldest_waiting_ms"}, ...}
--          running counts live leases; stalled, leases expired but not yet
--          reclaimed by a pop; complete, complete jobs still kept by retention;
--          failed, jobs of the queue failed for good (in any group);
--          cancelled, tombstones of cancelled jobs still kept by retention;
--          size_warning: the queue's size-warning setting (0: none);
--          *_total: completions reported, final failures and retries since the
--          queue was first used (never reset);
--          oldest_waiting_ms: how long the oldest waiting job has waited since
--          it became eligible (0: none waits).
-- Read-only (no-writes): runs while Redis is full, and on replicas.
-- Errors   BAD_ARG

local queues = ARGV
if #queues == 0 then
  queues = redis.call('ZRANGE', K.queues, 0, LIMITS.counts_max - 1)
end
local now_us = Clock.now_us()
local out = {}
for i, queue in ipairs(queues) do
  Check.queue('queue', queue)
  out[i] = cjson.encode(queue) .. ':' .. Stats.counts(queue, now_us)
end
return '{' .. table.concat(out, ',') .. '}'
