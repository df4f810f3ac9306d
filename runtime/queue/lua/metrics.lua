-- metrics.lua: everything a Prometheus scrape shows, in one call (runtime/metrics.py).
--
-- KEYS[1]  the namespace root
-- ARGV     up_ms: a worker seen within this many ms is up
-- Reply    {"now_ms": n,
--           "queues": {"<queue>": {counts as counts.lua gives them,
--                      "stats": {today's statistics fields (lib/stats.lua) of wait,
--                                run and usage: "wait:ms", "wait:hist:ms5", "u:cpu:1:k",
--                                ...}}},
--           "groups": {"<failure group>": n, ...},
--           "workers": {"<worker>": {"seen_ms": n, "running": n}, ...} (those up),
--           "batches": {"open": n, "oldest_ms": created ms of the oldest open batch,
--                       or null} (lib/batch.lua),
--           "domains": {"<domain>": {"slots": n (its jobs holding a lease),
--                       "concurrency": n | null (its cap)}, ...}}
--          Every known queue, at most counts_max; workers at most workers_max;
--          domains with jobs holding a lease or a cap, at most workers_max of each.
-- Read-only (no-writes): runs while Redis is full, and on replicas.
-- Errors   BAD_ARG

local up_ms = Check.int('up_ms', ARGV[1], 0, 1e12)
local now_us = Clock.now_us()
local now_ms = Clock.ms(now_us)
local day = math.floor(now_us / 86400000000)

-- Today's wait, run and usage fields of a queue, as a JSON object of numbers.
local function today(queue)
  local flat = redis.call('HGETALL', K.stats(queue, day))
  local parts = {}
  for i = 1, #flat, 2 do
    local what = string.sub(flat[i], 1, 4)
    if what == 'wait' or what == 'run:' or string.sub(what, 1, 2) == 'u:' then
      parts[#parts + 1] = cjson.encode(flat[i]) .. ':' .. flat[i + 1]
    end
  end
  return '{' .. table.concat(parts, ',') .. '}'
end

local queues = {}
for i, queue in ipairs(redis.call('ZRANGE', K.queues, 0, LIMITS.counts_max - 1)) do
  local counts = Stats.counts(queue, now_us)
  queues[i] = cjson.encode(queue) .. ':' .. string.sub(counts, 1, -2) .. ',"stats":'
    .. today(queue) .. '}'
end

local groups = {}
local flat = redis.call('ZRANGE', K.failed_groups, 0, -1, 'WITHSCORES')
for i = 1, #flat, 2 do
  groups[#groups + 1] = cjson.encode(flat[i]) .. ':' .. int(tonumber(flat[i + 1]))
end

local workers = {}
local seen = redis.call('ZREVRANGEBYSCORE', K.workers, '+inf', now_ms - up_ms, 'WITHSCORES',
  'LIMIT', 0, LIMITS.workers_max)
for i = 1, #seen, 2 do
  workers[#workers + 1] = cjson.encode(seen[i]) .. ':{"seen_ms":' .. int(tonumber(seen[i + 1]))
    .. ',"running":' .. redis.call('SCARD', K.worker_jobs(seen[i])) .. '}'
end

local oldest = redis.call('ZRANGE', K.batches, 0, 0, 'WITHSCORES')
local batches = '{"open":' .. redis.call('ZCARD', K.batches) .. ',"oldest_ms":'
  .. (oldest[2] and int(tonumber(oldest[2])) or 'null') .. '}'

local domains, listed = {}, {}
local function domain_entry(domain)
  if not listed[domain] then
    listed[domain] = true
    local lim = Domains.limit(domain)
    domains[#domains + 1] = cjson.encode(domain) .. ':{"slots":' .. int(Domains.slots(domain))
      .. ',"concurrency":' .. (lim and lim.cap and int(lim.cap) or 'null') .. '}'
  end
end
local using = redis.call('HSCAN', K.domain_slots, 0, 'COUNT', LIMITS.workers_max)[2]
for i = 1, #using, 2 do
  domain_entry(using[i])
end
local own = redis.call('HSCAN', K.domain_limits, 0, 'COUNT', LIMITS.workers_max)[2]
for i = 1, #own, 2 do
  local lim = Domains.limit(own[i])
  if lim and lim.cap then
    domain_entry(own[i])
  end
end

return '{"now_ms":' .. int(now_ms) .. ',"queues":{' .. table.concat(queues, ',')
  .. '},"groups":{' .. table.concat(groups, ',') .. '},"workers":{'
  .. table.concat(workers, ',') .. '},"batches":' .. batches
  .. ',"domains":{' .. table.concat(domains, ',') .. '}}'
