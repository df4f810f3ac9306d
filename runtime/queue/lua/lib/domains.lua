-- domains.lua: per-domain rate limits, shared by every queue, master and host.
--
-- A limit is `rate` starts per `period` seconds plus `burst` extra, enforced
-- with GCRA: each domain keeps one number, its theoretical arrival time (TAT,
-- microseconds, zset K.domain_tat). A start is allowed at `now` when
-- TAT - tolerance <= now, and then moves TAT one emission interval
-- (period / rate) further. Any window of one period then holds at most
-- rate + burst starts. Entries whose TAT has passed carry no information and
-- are pruned a few at a time. Limits: hash K.domain_limits, else the
-- deployment default (domain-rate / domain-period / domain-burst; rate 0 = none).

local Domains = {}
local limit_memo = {}

-- {interval = us, tau = us} for a limited domain, or false.
function Domains.limit(domain)
  local memo = limit_memo[domain]
  if memo ~= nil then
    return memo
  end
  local rate, period, burst
  local raw = redis.call('HGET', K.domain_limits, domain)
  if raw then
    local lim = cjson.decode(raw)
    rate, period, burst = lim.rate, lim.period, lim.burst or 0
  else
    rate, period, burst = Config.get('domain-rate'), Config.get('domain-period'),
        Config.get('domain-burst')
  end
  if not rate or rate <= 0 then
    memo = false
  else
    local interval = period * 1000000 / rate
    memo = { interval = interval, tau = interval * burst }
  end
  limit_memo[domain] = memo
  return memo
end

-- When the domain may start its next job (us), or nil if it may start one now.
function Domains.free_at(domain, now_us)
  if domain == '' then
    return nil
  end
  local lim = Domains.limit(domain)
  if not lim then
    return nil
  end
  local tat = tonumber(redis.call('ZSCORE', K.domain_tat, domain))
  if tat and tat - lim.tau > now_us then
    return tat - lim.tau
  end
  return nil
end

-- Spends one start of the domain's budget: nil when granted, else when it frees (us).
function Domains.acquire(domain, now_us)
  local lim = Domains.limit(domain)
  if not lim then
    return nil
  end
  local tat = tonumber(redis.call('ZSCORE', K.domain_tat, domain)) or now_us
  if tat < now_us then
    tat = now_us
  end
  if tat - lim.tau > now_us then
    return tat - lim.tau
  end
  redis.call('ZADD', K.domain_tat, int(math.ceil(tat + lim.interval)), domain)
  return nil
end

-- Forgets up to `count` domains whose budget is whole again.
function Domains.prune(now_us, count)
  local stale = redis.call('ZRANGEBYSCORE', K.domain_tat, '-inf', int(now_us), 'LIMIT', 0, count)
  if #stale > 0 then
    redis.call('ZREM', K.domain_tat, unpack(stale))
  end
end
