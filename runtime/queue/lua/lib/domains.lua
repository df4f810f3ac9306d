-- domains.lua: per-domain rate limits, shared by every queue, master and host.
--
-- A limit is `rate` starts per `period` seconds plus `burst` extra, enforced
-- with GCRA: each domain keeps one number, its theoretical arrival time (TAT,
-- microseconds, zset K.domain_tat). A start is allowed at `now` when
-- TAT - tolerance <= now, and then moves TAT one emission interval
-- (period / rate) further. Any window of one period then holds at most
-- rate + burst starts. Entries whose TAT has passed carry no information; pops
-- prune them as fast as they grant starts. Limits: hash K.domain_limits, else
-- the deployment default (domain-rate / domain-period / domain-burst; rate 0 =
-- none).
--
-- Changing a domain's own limit (Domains.set_limit) converts its TAT: the
-- starts it still owes are re-priced at the new interval, so clearing a limit of
-- one an hour frees the domain at once. A change of the default limit is not
-- converted (no script walks the domains): it applies from each domain's next
-- start, and lanes throttled under the old default keep their free time.

local Domains = {}
local limit_memo, memo_call = {}, 0 -- the limits read by call number memo_call (CALL)

-- {interval = us, tau = us} for a limited domain, or false.
function Domains.limit(domain)
  if memo_call ~= CALL then
    limit_memo, memo_call = {}, CALL
  end
  local memo = limit_memo[domain]
  if memo ~= nil then
    return memo
  end
  local rate, period, burst
  local raw = redis.call('HGET', K.domain_limits, domain)
  local ok, lim = false, nil
  if raw then
    ok, lim = Json.strict(raw)
    ok = ok and type(lim) == 'table' and type(lim.rate) == 'number'
      and type(lim.period) == 'number' and type(lim.burst or 0) == 'number'
  end
  if ok then -- a limit that does not decode counts as none of its own
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

-- Spends one start of the domain's budget. Returns granted, free_at: true and
-- nil while budget is left after this start; true and when the domain frees
-- (us) if this start spent the budget; false and when it frees if none was left.
-- Spends one start of the domain's budget. Returns granted, free_at, start_us:
-- free_at (us) when its next start may come if that lies beyond now + ahead_us
-- (nil: it may start another now); start_us, for a grant of a turn that comes
-- within ahead_us, is that turn: the job must not start before it. The
-- domain's TAT then moves from its turn, not from the (later) moment a master
-- came to take it, so a busy domain runs at its rate, not a little under it.
function Domains.acquire(domain, now_us, ahead_us)
  local lim = Domains.limit(domain)
  if not lim then
    return true, nil, nil
  end
  local horizon = now_us + (ahead_us or 0)
  local tat = tonumber(redis.call('ZSCORE', K.domain_tat, domain)) or now_us
  if tat < now_us then
    tat = now_us
  end
  local turn = tat - lim.tau
  if turn > horizon then
    return false, turn, nil
  end
  local start_us = turn > now_us and turn or nil
  local next_tat = math.ceil(tat + lim.interval)
  redis.call('ZADD', K.domain_tat, int(next_tat), domain)
  if next_tat - lim.tau > horizon then
    return true, next_tat - lim.tau, start_us
  end
  return true, nil, start_us
end

-- Sets (limit_json) or clears (nil) the domain's own limit, re-pricing the
-- starts its TAT still owes at the new limit's interval.
function Domains.set_limit(domain, limit_json, now_us)
  local old = Domains.limit(domain)
  if limit_json then
    redis.call('HSET', K.domain_limits, domain, limit_json)
  else
    redis.call('HDEL', K.domain_limits, domain)
  end
  limit_memo[domain] = nil
  local new = Domains.limit(domain)
  local tat = tonumber(redis.call('ZSCORE', K.domain_tat, domain))
  if not tat then
    return
  end
  if not new or tat <= now_us then
    redis.call('ZREM', K.domain_tat, domain)
  elseif old then
    local owed = (tat - now_us) / old.interval
    redis.call('ZADD', K.domain_tat, int(math.ceil(now_us + owed * new.interval)), domain)
  end
end

-- Forgets up to `count` domains whose budget is whole again.
function Domains.prune(now_us, count)
  local stale = redis.call('ZRANGEBYSCORE', K.domain_tat, '-inf', int(now_us), 'LIMIT', '0',
    int(count))
  if #stale > 0 then
    redis.call('ZREM', K.domain_tat, unpack(stale))
  end
end
