-- lease.lua: leases are fenced claims on running jobs.
--
-- A lease is (worker, token) with an expiry: K.running(queue) scores the job by
-- expiry (us), the record keeps w and l, and K.worker_jobs(worker) lists what a
-- worker holds. A renewal only touches the zset, never the record. Tokens are
-- fresh per pop: sha1(seed .. jid .. attempt), the seed coming from the popping
-- client. Only the holder may heartbeat, complete, fail or retry; once the
-- lease expired it is lost, even before another pop reclaims the job (unless
-- post-outage grace holds it, below).

-- Post-outage grace. A master that could not reach Redis for a while reports
-- it (resumed.lua) before its first renewal; the deployment then keeps a grace
-- window in K.grace: from_us (when the outage began), resumed_us (when it was
-- reported). A lease of queue q that expired at E > from_us (during the
-- outage, or after it) is still held while now < resumed_us + q's heartbeat:
-- pops do not reclaim it, and its holder may renew it and report. Leases that
-- expired before the outage are reclaimed as usual. A second master reporting
-- the same outage (it began before the window's resumed_us) widens the window
-- (earliest from_us, latest resumed_us); a new outage while the last one's
-- grace lasts keeps that one as prev_from_us / prev_resumed_us. until_us (the
-- longest heartbeat after the last report) is when the whole window is over;
-- the key expires then. Nothing reads K.grace unless a lease has expired.

local Grace = {}
-- by call window_call: nil, not read; false, none open; else the fields, numbers
local window, window_call = nil, 0

local FIELDS = { 'from_us', 'resumed_us', 'until_us', 'prev_from_us', 'prev_resumed_us' }

local function open_window(now_us)
  if window_call ~= CALL then
    window, window_call = nil, CALL
  end
  if window == nil then
    local got = redis.call('HMGET', K.grace, unpack(FIELDS))
    window = {}
    for i, name in ipairs(FIELDS) do
      window[name] = tonumber(got[i])
    end
    if not (window.from_us and window.resumed_us and window.until_us) then
      window = false
    elseif now_us >= window.until_us then
      redis.call('DEL', K.grace)
      window = false
    end
  end
  return window
end

-- Until when (us) a lease of `queue` that expired at expiry_us is held by grace;
-- nil when it is not.
function Grace.until_us(queue, expiry_us, now_us)
  local w = open_window(now_us)
  if not w then
    return nil
  end
  local lease_us = Config.get('heartbeat', queue) * 1000000
  local ends
  if expiry_us > w.from_us and now_us < w.resumed_us + lease_us then
    ends = w.resumed_us + lease_us
  end
  if w.prev_from_us and w.prev_resumed_us and expiry_us > w.prev_from_us
      and now_us < w.prev_resumed_us + lease_us then
    ends = math.max(ends or 0, w.prev_resumed_us + lease_us)
  end
  return ends
end

-- The latest expiry (us) a pop may reclaim in `queue` now: now_us, or earlier
-- while grace holds the leases that expired after an outage began.
function Grace.reclaim_bound(queue, now_us)
  local w = open_window(now_us)
  if not w then
    return now_us
  end
  local lease_us = Config.get('heartbeat', queue) * 1000000
  local bound = now_us
  if now_us < w.resumed_us + lease_us then
    bound = math.min(bound, w.from_us)
  end
  if w.prev_from_us and w.prev_resumed_us and now_us < w.prev_resumed_us + lease_us then
    bound = math.min(bound, w.prev_from_us)
  end
  return bound
end

-- Opens or widens the window for an outage of `worker` from from_us to now_us;
-- returns the window's from_us and until_us.
function Grace.open(worker, from_us, now_us)
  local w = open_window(now_us)
  local until_us = now_us + Config.max('heartbeat') * 1000000
  local prev_from, prev_resumed
  if w and from_us <= w.resumed_us then -- the same outage, another master reporting it
    from_us = math.min(from_us, w.from_us)
    prev_from, prev_resumed = w.prev_from_us, w.prev_resumed_us
  elseif w then -- a new outage while the last one's grace lasts: keep that one too
    prev_from, prev_resumed = w.from_us, w.resumed_us
  end
  if w then
    until_us = math.max(until_us, w.until_us)
  end
  redis.call('DEL', K.grace)
  redis.call('HSET', K.grace, 'from_us', int(from_us), 'resumed_us', int(now_us),
    'until_us', int(until_us), 'worker', worker)
  if prev_from and prev_resumed then
    redis.call('HSET', K.grace, 'prev_from_us', int(prev_from), 'prev_resumed_us',
      int(prev_resumed))
  end
  redis.call('PEXPIRE', K.grace, math.ceil((until_us - now_us) / 1000))
  window = { from_us = from_us, resumed_us = now_us, until_us = until_us,
    prev_from_us = prev_from, prev_resumed_us = prev_resumed }
  return from_us, until_us
end

local Lease = {}

-- Workers seen (K.workers: worker -> when last seen, ms). A pop marks its worker
-- seen, but writes the time only when the one it wrote last is a second old or
-- more (SEEN_MS): a master popping jobs one by one paid a ZADD per pop. The
-- times written are remembered by the library (FCALL), at most SEEN_MAX workers
-- of one namespace; a script run by EVALSHA remembers nothing, so writes every
-- time. Heartbeats go the same way; a master's registration writes its time
-- every time; forgetting a worker (Lease.unseen) forgets its time here too.
local SEEN_MS, SEEN_MAX = 1000, 1024
local seen_written, seen_n, seen_ns = {}, 0, nil

function Lease.seen(worker, now_ms)
  if seen_ns ~= NS then
    seen_written, seen_n, seen_ns = {}, 0, NS
  end
  local at = seen_written[worker]
  if at and now_ms >= at and now_ms - at < SEEN_MS then
    return
  end
  redis.call('ZADD', K.workers, int(now_ms), worker)
  if not at then
    if seen_n >= SEEN_MAX then
      seen_written, seen_n = {}, 0
    end
    seen_n = seen_n + 1
  end
  seen_written[worker] = now_ms
end

function Lease.unseen(worker)
  if seen_ns == NS then
    seen_written[worker] = nil
  end
  redis.call('ZREM', K.workers, worker)
end

-- Lease.grant(jid, meta, worker, seed, now_us, lease_s): the move into running
-- that a lease is, Place.to_running (place.lua binds it: it comes after this file).

-- The lease fields of a reply, made once per call and queue for the jobs
-- that have no timeout of their own and were not handed (their lease is the
-- queue's, from the call's time): queue -> text.
local lease_fields, fields_call = {}, 0 -- made by call fields_call

-- Leases a job taken from its queue to `worker` and returns its reply (JSON):
-- {"jid", "meta", "data", "lease_ms", "timeout_s", "expires_us"[, "start_in_us"]
-- [, "handed": true]}. lease_ms is the queue's heartbeat (how often the holder
-- renews); expires_us when this lease runs out (Redis time): `first_lease_s`,
-- if given, sets a shorter first lease (a job handed to an idle master, which
-- renews it at once). start_us: the job's turn, if it comes after now_us.
function Lease.hand(jid, meta, data, worker, seed, now_us, start_us, first_lease_s)
  local now_ms = Clock.ms(now_us)
  local waits = start_us and start_us > now_us
  Stats.time(meta.q, 'wait', math.max(0, now_ms - (meta.qt or Job.put_ms(meta))) / 1000, now_us)
  local expires_us = Lease.grant(jid, meta, worker, seed, now_us, first_lease_s)
  Job.event(jid, meta, now_ms, 'popped', {
    w = worker, sa = waits and Clock.ms(start_us) or nil, ho = first_lease_s and 1 or nil,
  })
  local head = Job.save(jid, meta, data, true) -- only read below
  local shared = not (meta.to or first_lease_s)
  if fields_call ~= CALL then
    lease_fields, fields_call = {}, CALL
  end
  local extra = shared and lease_fields[meta.q]
  if not extra then
    extra = ',"lease_ms":' .. int(Config.get('heartbeat', meta.q) * 1000) .. ',"timeout_s":'
      .. Json.number(meta.to or Config.get('timeout', meta.q)) .. ',"expires_us":'
      .. int(expires_us)
    if shared then
      lease_fields[meta.q] = extra
    end
  end
  if waits then
    extra = extra .. ',"start_in_us":' .. int(start_us - now_us)
  end
  if first_lease_s then
    extra = extra .. ',"handed":true'
  end
  return Job.lease_reply(jid, meta, data, head, extra)
end

-- The lease expiry (us), or nil when the job is not in its queue's running set.
function Lease.expiry(jid, meta)
  return tonumber(redis.call('ZSCORE', K.running(meta.q), jid))
end

-- The expiry of the job's lease while it holds (not expired, or held by
-- post-outage grace), else nil.
function Lease.live(jid, meta, now_us)
  local expiry = Lease.expiry(jid, meta)
  if expiry and (expiry >= now_us or Grace.until_us(meta.q, expiry, now_us)) then
    return expiry
  end
  return nil
end

function Lease.renew(jid, meta, now_us)
  local expires_us = now_us + Config.get('heartbeat', meta.q) * 1000000
  Due.lower(meta.q, expires_us) -- a shorter heartbeat than before renews to an earlier time
  redis.call('ZADD', K.running(meta.q), 'XX', int(expires_us), jid)
  return expires_us
end

-- The lease ends (whatever ended it): Place.drop_lease (place.lua).

-- A job failed as corrupt is held by no one: out of the set of a worker that
-- says it holds it (a record whose meta was lost did not say whose it was).
function Lease.forget_corrupt(jid, worker)
  redis.call('SREM', K.worker_jobs(worker), jid)
end

-- Raises LEASE_LOST unless (worker, token) holds a live lease on the job
-- (Lease.live). Returns true when that holder already did `op` with this
-- lease: a repeated call (a client retrying after a lost reply) that must
-- answer and change nothing.
function Lease.check(jid, meta, worker, token, op, now_us)
  if meta.l == token and meta.w == worker then
    if meta.s == RUNNING then
      if Lease.live(jid, meta, now_us) then
        return false
      end
      E.raise('LEASE_LOST', 'the lease on ' .. jid .. ' expired')
    end
    if meta.lr == op then
      return true
    end
  end
  if meta.cr then
    Lease.forget_corrupt(jid, worker)
    E.raise('LEASE_LOST',
      jid .. ' was failed as runtime.CorruptJob: its stored record did not decode')
  end
  E.raise('LEASE_LOST', jid .. ' is not leased to worker ' .. worker .. ' with that token')
end
