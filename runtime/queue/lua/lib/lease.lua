-- lease.lua: leases are fenced claims on running jobs.
--
-- A lease is (worker, token) with an expiry: K.running(queue) scores the job by
-- expiry (us), the record keeps w and l, and K.worker_jobs(worker) lists what a
-- worker holds. A renewal only touches the zset, never the record. Tokens are fresh per pop: sha1(seed .. jid .. attempt),
-- the seed coming from the popping client. Only the holder may heartbeat,
-- complete, fail or retry; once the lease expired it is lost, even before
-- another pop reclaims the job.

local Lease = {}

function Lease.grant(jid, meta, worker, seed, now_us)
  local expires_us = now_us + Config.get('heartbeat', meta.q) * 1000000
  meta.a = (meta.a or 0) + 1
  meta.s, meta.w, meta.lr, meta.pt = 'running', worker, nil, Clock.ms(now_us)
  meta.l = string.sub(redis.sha1hex(seed .. jid .. meta.a), 1, 24)
  redis.call('ZADD', K.running(meta.q), int(expires_us), jid)
  redis.call('SADD', K.worker_jobs(worker), jid)
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
