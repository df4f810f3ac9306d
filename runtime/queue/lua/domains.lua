-- domains.lua: the domains with a limit of their own or with their budget spent
-- now, with how many of their jobs are throttled and when they may start again.
--
-- KEYS[1]  the namespace root
-- ARGV     count (1..get_max): most domains of each kind (own limit; spent budget)
-- Reply    {"<domain>": {"limit": {"rate", "period", "burst"} | null (the default
--          applies), "throttled": n (jobs in throttled lanes, every queue and
--          priority, at most release_batch lanes looked at), "next_start_ms": n |
--          null (null: it may start a job now)}, ...}. Reads only.
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

local parts = {}
for _, domain in ipairs(order) do
  local raw = redis.call('HGET', K.domain_limits, domain)
  local ok, limit = false, nil
  if raw then
    ok, limit = Json.strict(raw)
  end
  local free_at = Domains.free_at(domain, now_us)
  parts[#parts + 1] = cjson.encode(domain) .. ':' .. Json.object({
    { 'limit', ok and type(limit) == 'table' and raw or 'null' },
    { 'throttled', int(throttled_jobs(domain)) },
    { 'next_start_ms', free_at and int(Clock.ms(free_at)) or 'null' },
  })
end
return '{' .. table.concat(parts, ',') .. '}'
