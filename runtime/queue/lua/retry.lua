-- retry.lua: the lease holder gives jobs back for another attempt (many in one step).
--
-- KEYS[1]  the namespace root
-- ARGV     worker, then per job: jid, token, group, message, delay_ms, output
--          delay_ms: -1 for the backoff policy: exponential from backoff-min,
--          doubling per retry spent, at most backoff-max, with jitter in its
--          upper half (the job's own backoff, else the queue's, else the
--          deployment's); 0 for now
--          output: "" or the attempt's output tail, kept with the job
--          (lib/attempt.lua)
-- A job with no retries left fails instead, with this group and message (and
-- the jobs waiting on it too, as runtime.DependencyFailed: lib/deps.lua).
-- Reply    JSON list, one entry per job: {"jid", "ok": true, "state"} (state:
--          scheduled, waiting or failed) or {"jid", "error": code, "message"}.
--          A repeated retry with the same token answers ok and changes nothing.
-- Errors   per job: LEASE_LOST (also for a job whose record does not decode: it
--          is failed first, as runtime.CorruptJob, lib/job.lua), NO_SUCH_JOB,
--          BAD_ARG; BAD_ARG for malformed ARGV

local worker = Check.token('worker', ARGV[1], LIMITS.worker_max)
if #ARGV % 6 ~= 1 then
  E.bad('retry takes a worker, then groups of jid, token, group, message, delay_ms and output')
end
local now_us = Clock.now_us()
local now_ms = Clock.ms(now_us)

local function backoff_ms(jid, meta)
  local lo = meta.bo and meta.bo[1] or Config.get('backoff-min', meta.q)
  local hi = meta.bo and meta.bo[2] or Config.get('backoff-max', meta.q)
  local spent = meta.r - meta.m -- retries used before this one
  local base = math.min(hi, lo * 2 ^ math.min(spent, 60))
  local jitter = tonumber(string.sub(redis.sha1hex(jid .. ':' .. (meta.a or 0)), 1, 8), 16) / 4294967296
  local delay = math.max(lo, math.min(hi, base * (0.5 + 0.5 * jitter)))
  return math.floor(delay * 1000)
end

local function retry(jid, token, group, message, delay_arg, output)
  local meta, data = Job.must(jid)
  if Lease.check(jid, meta, worker, token, 'retry', now_us) then
    return meta.s
  end
  Check.token('group', group, LIMITS.group_max)
  local delay_ms = Check.int('delay_ms', delay_arg, -1, LIMITS.delay_max_ms)
  Lease.drop(jid, meta)
  Attempt.output(jid, meta, output)
  meta.lr = 'retry'
  Stats.count(meta.q, 'failures', now_us)
  if meta.m <= 0 then
    Place.fail(jid, meta, group, message, worker, now_us)
    Job.save(jid, meta, data)
    return meta.s
  end
  if delay_ms < 0 then
    delay_ms = backoff_ms(jid, meta)
  end
  Stats.count(meta.q, 'retries', now_us)
  meta.m = meta.m - 1
  meta.f = { g = group, m = Job.cap_message(message), t = now_ms, w = worker }
  Job.event(jid, meta, now_ms, 'retried', { w = worker, g = group, dl = delay_ms })
  Place.enqueue(jid, meta, data, now_ms + delay_ms, now_us, false)
  return meta.s
end

local out = {}
for i = 2, #ARGV, 6 do
  out[#out + 1] = E.item(ARGV[i], E.attempt(retry, ARGV[i], ARGV[i + 1], ARGV[i + 2],
    ARGV[i + 3], ARGV[i + 4], ARGV[i + 5]))
end
Stats.flush()
return '[' .. table.concat(out, ',') .. ']'
