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
--
-- Concurrency caps. A domain's own record may also hold `concurrency` (K: at
-- most K of its jobs hold a lease at once, every queue and master together)
-- and `paused` (none of its jobs starts). K.domain_slots counts, for every
-- domain, its jobs in a running set: a lease taken adds one (Lease.grant,
-- which marks the record: meta.sl), its end takes one back (Lease.drop:
-- complete, fail, retry, release, cancel, a reclaimed lease), so a dead
-- master's slots come back when its leases are reclaimed. A domain at its cap, or paused, may start nothing: its lanes
-- are throttled until Due.HELD (no time frees them), and the end that frees
-- a slot readies them again (Domains.give_slot, then Lanes.rescore_domain).
-- A rate and a cap combine: a start needs both. A record without a rate of
-- its own takes the default rate.

local Domains = {}
local limit_memo, memo_call = {}, 0 -- the limits read by call number memo_call (CALL)
do -- this file's own locals end with it: a library's main chunk holds at most 200

local HELD = Due.HELD

-- The domain's own record, decoded ({} for none or one that does not decode).
function Domains.record(domain)
  local raw = redis.call('HGET', K.domain_limits, domain)
  if raw then
    local ok, rec = Json.strict(raw)
    if ok and type(rec) == 'table' then
      return rec
    end
  end
  return {}
end

-- {interval = us | nil, tau = us, cap = n | nil, paused = true | nil} for a
-- domain with a rate, a cap or a pause, else false.
function Domains.limit(domain)
  if memo_call ~= CALL then
    limit_memo, memo_call = {}, CALL
  end
  local memo = limit_memo[domain]
  if memo ~= nil then
    return memo
  end
  local rec = Domains.record(domain)
  local rate, period, burst
  if type(rec.rate) == 'number' and type(rec.period) == 'number'
      and type(rec.burst or 0) == 'number' then
    rate, period, burst = rec.rate, rec.period, rec.burst or 0
  else -- no rate of its own (or one that does not decode): the default applies
    rate, period, burst = Config.get('domain-rate'), Config.get('domain-period'),
        Config.get('domain-burst')
  end
  local cap = type(rec.concurrency) == 'number' and rec.concurrency or nil
  local paused = rec.paused == true or nil
  memo = false
  if (rate and rate > 0) or cap or paused then
    memo = { cap = cap, paused = paused, tau = 0 }
    if rate and rate > 0 then
      memo.interval = period * 1000000 / rate
      memo.tau = memo.interval * burst
    end
  end
  limit_memo[domain] = memo
  return memo
end

-- How many of the domain's jobs hold a lease now.
function Domains.slots(domain)
  return tonumber(redis.call('HGET', K.domain_slots, domain)) or 0
end

-- A job of the domain took a lease.
function Domains.take_slot(domain)
  redis.call('HINCRBY', K.domain_slots, domain, 1)
end

-- A job of the domain gave its lease back; true when that made room under
-- the domain's cap that was not there (its lanes wait for it: Lanes.rescore_domain).
function Domains.give_slot(domain)
  local left = redis.call('HINCRBY', K.domain_slots, domain, -1)
  if left <= 0 then
    redis.call('HDEL', K.domain_slots, domain)
  end
  local lim = Domains.limit(domain)
  return lim and lim.cap ~= nil and not lim.paused and left == lim.cap - 1
end

-- Whether the domain may start nothing now whatever the time (paused, or its
-- jobs hold every slot).
local function held(domain, lim)
  return lim.paused or (lim.cap and Domains.slots(domain) >= lim.cap)
end

-- When the domain may start its next job (us; Due.HELD: when a slot frees or
-- it resumes), or nil if it may start one now.
function Domains.free_at(domain, now_us)
  if domain == '' then
    return nil
  end
  local lim = Domains.limit(domain)
  if not lim then
    return nil
  elseif held(domain, lim) then
    return HELD
  elseif not lim.interval then
    return nil
  end
  local tat = tonumber(redis.call('ZSCORE', K.domain_tat, domain))
  if tat and tat - lim.tau > now_us then
    return tat - lim.tau
  end
  return nil
end

-- Spends one start of the domain's budget. Returns granted, free_at, start_us:
-- free_at (us) when its next start may come if that lies beyond now + ahead_us
-- (nil: it may start another now; Due.HELD: not before a slot frees or it
-- resumes); start_us, for a grant of a turn that comes within ahead_us, is
-- that turn: the job must not start before it. The domain's TAT then moves
-- from its turn, not from the (later) moment a master came to take it, so a
-- busy domain runs at its rate, not a little under it. The slot itself is
-- taken with the lease (Lease.grant).
function Domains.acquire(domain, now_us, ahead_us)
  local lim = Domains.limit(domain)
  if not lim then
    return true, nil, nil
  end
  local full_after = false
  if lim.paused then
    return false, HELD, nil
  elseif lim.cap then
    local used = Domains.slots(domain)
    if used >= lim.cap then
      return false, HELD, nil
    end
    full_after = used + 1 >= lim.cap
  end
  if not lim.interval then
    return true, full_after and HELD or nil, nil
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
  if full_after then
    return true, HELD, start_us
  elseif next_tat - lim.tau > horizon then
    return true, next_tat - lim.tau, start_us
  end
  return true, nil, start_us
end

-- Writes the domain's own record (a table: rate, period, burst, concurrency,
-- paused; empty: none), re-pricing the starts its TAT still owes at the new
-- rate's interval.
function Domains.write(domain, rec, now_us)
  local old = Domains.limit(domain)
  if next(rec) then
    redis.call('HSET', K.domain_limits, domain, cjson.encode(rec))
  else
    redis.call('HDEL', K.domain_limits, domain)
  end
  limit_memo[domain] = nil
  local new = Domains.limit(domain)
  local tat = tonumber(redis.call('ZSCORE', K.domain_tat, domain))
  if not tat then
    return
  end
  if not (new and new.interval) or tat <= now_us then
    redis.call('ZREM', K.domain_tat, domain)
  elseif old and old.interval then
    local owed = (tat - now_us) / old.interval
    redis.call('ZADD', K.domain_tat, int(math.ceil(now_us + owed * new.interval)), domain)
  end
end
end -- of domains.lua's own locals

-- Forgets up to `count` domains whose budget is whole again.
function Domains.prune(now_us, count)
  local stale = redis.call('ZRANGEBYSCORE', K.domain_tat, '-inf', int(now_us), 'LIMIT', '0',
    int(count))
  if #stale > 0 then
    redis.call('ZREM', K.domain_tat, unpack(stale))
  end
end
