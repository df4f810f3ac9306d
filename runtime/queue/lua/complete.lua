-- complete.lua: the lease holder reports jobs done (many in one step).
--
-- KEYS[1]  the namespace root
-- ARGV     worker, then per job: jid, token, options
--          options: JSON object, {} or {"next": queue, "delay_ms": n, "depends": [jid]}
--          with next, the job moves on to that queue (retries renewed) instead
--          of completing; delay and depends only go with next
-- Reply    JSON list, one entry per job, in order:
--          {"jid", "ok": true, "state"} or {"jid", "error": code, "message"}
--          A completion repeated with the same token answers ok, changes nothing.
--          A call that completed a job also deletes completed jobs past
--          retention (lib/retention.lua); one that completed none changes nothing.
-- Errors   per job: LEASE_LOST, NO_SUCH_JOB, BAD_ARG (that job unchanged);
--          BAD_ARG for the whole call when ARGV is malformed

local worker = Check.token('worker', ARGV[1], LIMITS.worker_max)
if #ARGV % 3 ~= 1 then
  E.bad('complete takes a worker, then triples of jid, token and options')
end
local now_us = Clock.now_us()
local now_ms = Clock.ms(now_us)
local completed = 0 -- jobs this call added to K.completed

local function complete(jid, token, options_json)
  local meta, data = Job.must(jid)
  if Lease.check(jid, meta, worker, token, 'complete', now_us) then
    return meta.s
  end
  local opts = Json.decode('options', options_json)
  local next_queue = Check.optional(opts.next)
  local delay_ms = Check.optional(opts.delay_ms)
  local depends = Check.tokens('depends', Check.optional(opts.depends), LIMITS.jid_max,
    LIMITS.depends_max)
  if next_queue == nil then
    if delay_ms ~= nil or #depends > 0 then
      E.bad('delay and depends need a next queue')
    end
  else
    Check.queue('next', next_queue)
    if delay_ms ~= nil then
      Check.int('delay_ms', delay_ms, 0, LIMITS.delay_max_ms)
    end
    Deps.check(jid, depends)
  end

  Lease.drop(jid, meta)
  Stats.time(meta.q, 'run', (now_ms - (meta.pt or now_ms)) / 1000, now_us)
  meta.lr, meta.f = 'complete', nil
  if next_queue then
    Job.event(jid, meta, now_ms, 'completed', { w = worker, q = next_queue, fq = meta.q })
    meta.q, meta.m, meta.a, meta.o = next_queue, meta.r, nil, nil
    Place.enqueue(jid, meta, data, delay_ms and now_ms + delay_ms, now_us, Deps.add(jid, depends) > 0)
  elseif meta.rq then -- a duplicate came while it ran: once more
    Job.event(jid, meta, now_ms, 'completed', { w = worker, n = 'again' })
    meta.rq, meta.m, meta.a, meta.o = nil, meta.r, nil, nil
    Place.enqueue(jid, meta, data, nil, now_us, false)
  else
    Job.event(jid, meta, now_ms, 'completed', { w = worker })
    meta.s, meta.o = 'complete', nil
    Unique.release(jid, meta, meta.uf)
    redis.call('ZADD', K.completed, int(now_us), jid)
    completed = completed + 1
    Job.save(jid, meta, data)
    Place.release_dependents(jid, now_us)
  end
  return meta.s
end

local out = {}
for i = 2, #ARGV, 3 do
  out[#out + 1] = E.item(ARGV[i], E.attempt(complete, ARGV[i], ARGV[i + 1], ARGV[i + 2]))
end
if completed > 0 then
  Retention.trim(now_us, LIMITS.retention_batch)
end
Stats.flush()
return '[' .. table.concat(out, ',') .. ']'
