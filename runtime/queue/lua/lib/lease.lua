-- lease.lua: leases are fenced claims on running jobs.
--
-- A lease is (worker, token) with an expiry: K.running(queue) scores the job by
-- expiry (us), the record keeps w and l, and K.worker_jobs(worker) lists what a
-- worker holds. A renewal only touches the zset, never the record. Tokens are fresh per pop: sha1(seed .. jid .. attempt),
-- the seed coming from the popping client. Only the holder may heartbeat,
-- complete, fail or retry; once the lease expired it is lost, even before
-- another pop reclaims the job.

local Lease = {}

function Lease.grant(jid, meta, worker, seed, now_us, lease_s)
  local expires_us = now_us + (lease_s or Config.get('heartbeat', meta.q)) * 1000000
  meta.a = (meta.a or 0) + 1
  meta.s, meta.w, meta.lr, meta.pt = 'running', worker, nil, Clock.ms(now_us)
  meta.l = string.sub(redis.sha1hex(seed .. jid .. meta.a), 1, 24)
  redis.call('ZADD', K.running(meta.q), int(expires_us), jid)
  redis.call('SADD', K.worker_jobs(worker), jid)
  return expires_us
end

-- Leases a job taken from its queue to `worker` and returns its reply (JSON):
-- {"jid", "meta", "data", "lease_ms", "timeout_s", "expires_us"[, "start_in_us"]
-- [, "handed": true]}. lease_ms is the queue's heartbeat (how often the holder
-- renews); expires_us when this lease runs out (Redis time): `first_lease_s`,
-- if given, sets a shorter first lease (a job handed to an idle master, which
-- renews it at once). start_us: the job's turn, if it comes after now_us.
function Lease.hand(jid, meta, data, worker, seed, now_us, start_us, first_lease_s)
  local now_ms = Clock.ms(now_us)
  local waits = start_us and start_us > now_us
  Stats.time(meta.q, 'wait', math.max(0, now_ms - (meta.qt or meta.h[1].t)) / 1000, now_us)
  local expires_us = Lease.grant(jid, meta, worker, seed, now_us, first_lease_s)
  Job.event(jid, meta, now_ms, 'popped', {
    w = worker, sa = waits and Clock.ms(start_us) or nil, ho = first_lease_s and 1 or nil,
  })
  local encoded = Job.save(jid, meta, data)
  local extra = {
    { 'lease_ms', int(Config.get('heartbeat', meta.q) * 1000) },
    { 'timeout_s', cjson.encode(meta.to or Config.get('timeout', meta.q)) },
    { 'expires_us', int(expires_us) },
  }
  if waits then
    extra[#extra + 1] = { 'start_in_us', int(start_us - now_us) }
  end
  if first_lease_s then
    extra[#extra + 1] = { 'handed', 'true' }
  end
  return Job.reply(jid, meta, data, extra, encoded)
end

-- The lease expiry (us), or nil when the job is not in its queue's running set.
function Lease.expiry(jid, meta)
  return tonumber(redis.call('ZSCORE', K.running(meta.q), jid))
end

function Lease.renew(jid, meta, now_us)
  local expires_us = now_us + Config.get('heartbeat', meta.q) * 1000000
  redis.call('ZADD', K.running(meta.q), 'XX', int(expires_us), jid)
  return expires_us
end

function Lease.drop(jid, meta)
  redis.call('ZREM', K.running(meta.q), jid)
  if meta.w then
    redis.call('SREM', K.worker_jobs(meta.w), jid)
  end
end

-- Raises LEASE_LOST unless (worker, token) holds a live lease on the job.
-- Returns true when that holder already did `op` with this lease: a repeated
-- call (a client retrying after a lost reply) that must answer and change nothing.
function Lease.check(jid, meta, worker, token, op, now_us)
  if meta.l == token and meta.w == worker then
    if meta.s == 'running' then
      local expiry = Lease.expiry(jid, meta)
      if expiry and expiry >= now_us then
        return false
      end
      E.raise('LEASE_LOST', 'the lease on ' .. jid .. ' expired')
    end
    if meta.lr == op then
      return true
    end
  end
  E.raise('LEASE_LOST', jid .. ' is not leased to worker ' .. worker .. ' with that token')
end
