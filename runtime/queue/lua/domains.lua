-- domains.lua: the domains with a limit of their own, with their budget spent
-- now or with jobs holding a lease, with how many of their jobs are throttled,
-- how many run and when they may start again.
--
-- KEYS[1]  the namespace root
-- ARGV     count (1..get_max): most domains of each kind (own limit; spent
--          budget; jobs holding a lease)
-- Reply    {"<domain>": {"limit": {"rate", "period", "burst", "concurrency",
--          "paused"} (each as set) | null (the default applies), "throttled": n
--          (jobs in throttled lanes, every queue and priority, at most
--          release_batch lanes looked at), "next_start_ms": n | null (null: it
--          may start a job now, or waits for no time: full or paused),
--          "slots": n (its jobs holding a lease now), "paused": bool, "full":
--          bool (its jobs hold every slot of its cap)}, ...}. Reads only.
-- Read-only (no-writes): runs while Redis is full, and on replicas.
-- Errors   BAD_ARG

local count = Check.int('count', ARGV[1], 1, LIMITS.get_max)
local now_us = Clock.now_us()

local function throttled_jobs(domain)
  local n = 0
  for _, entry in ipairs(redis.call('ZRANGE', K.domain_lanes(domain), 0, LIMITS.release_batch - 1)) do
    local bar = string.find(entry, '|', 1, true)
    local prio, queue = string.sub(entry, 1, bar - 1), string.sub(entry, bar + 1)
    if redis.call('ZSCORE', K.throttled(queue), prio .. '|' .. domain) then
      n = n + redis.call('LLEN', K.lane(queue, prio, domain))
    end
  end
  return n
end

local seen, order = {}, {}
local function add(domain)
  if not seen[domain] then
    seen[domain] = true
    order[#order + 1] = domain
  end
end
local own = redis.call('HSCAN', K.domain_limits, 0, 'COUNT', count)[2]
for i = 1, math.min(#own, 2 * count), 2 do
  add(own[i])
end
for _, domain in ipairs(redis.call('ZRANGEBYSCORE', K.domain_tat, '(' .. int(now_us), '+inf',
    'LIMIT', 0, count)) do
  add(domain)
end
local running = redis.call('HSCAN', K.domain_slots, 0, 'COUNT', count)[2]
for i = 1, math.min(#running, 2 * count), 2 do
  add(running[i])
end

local parts = {}
for _, domain in ipairs(order) do
  local raw = redis.call('HGET', K.domain_limits, domain)
  local ok, limit = false, nil
  if raw then
    ok, limit = Json.strict(raw)
  end
  local free_at = Domains.free_at(domain, now_us)
  local lim = Domains.limit(domain)
  local used = Domains.slots(domain)
  if free_at and free_at >= Due.HELD then
    free_at = nil
  end
  parts[#parts + 1] = cjson.encode(domain) .. ':' .. Json.object({
    { 'limit', ok and type(limit) == 'table' and raw or 'null' },
    { 'throttled', int(throttled_jobs(domain)) },
    { 'next_start_ms', free_at and int(Clock.ms(free_at)) or 'null' },
    { 'slots', int(used) },
    { 'paused', lim and lim.paused and 'true' or 'false' },
    { 'full', lim and lim.cap and used >= lim.cap and 'true' or 'false' },
  })
end
return '{' .. table.concat(parts, ',') .. '}'
