-- complete.lua: the lease holder reports jobs done (many in one step).
--
-- KEYS[1]  the namespace root
-- ARGV     worker, then per job: jid, token, options, result, output
--          options: JSON object, {} or any of
--            "next": queue, "delay_ms": n, "depends": [jid]  with next, the job
--                moves on to that queue (retries renewed) instead of completing;
--                delay and depends only go with next
--            "puts": [[spec JSON, data JSON], ...]  jobs to put with the
--                completion (put.lua's pairs; at most puts_max), in this same
--                step: all of them or none
--            "note": text  for the job's history (e.g. why no result was sent)
--          result: "" or JSON text, the job's return value ("null" is none);
--            stored (lib/attempt.lua) when the job completes, if it decodes
--            and is at most result-max-bytes; else it completes without one
--            and its history says why. A job that moves on (next, or once more
--            for requeue_if_running) keeps none
--          output: "" or the attempt's output tail (kept: its last
--            output_max_bytes), kept with the job as its last attempt's
-- Reply    JSON list, one entry per job, in order:
--          {"jid", "ok": true, "state"} or {"jid", "error": code, "message"}
--          A completion repeated with the same token answers ok, changes
--          nothing (and puts nothing again).
--          A put that is refused (a bad spec, a jid taken, an unknown
--          dependency ...) fails the job for good instead, as
--          runtime.PutRefused with the reason: nothing it put, no result
--          (state "failed"; its output is kept). Retrying would refuse it again.
--          A call that completed a job also deletes completed jobs past
--          retention (lib/retention.lua); one that completed none changes nothing.
-- Errors   per job: LEASE_LOST, NO_SUCH_JOB, BAD_ARG (that job unchanged; but a
--          job whose record does not decode is failed first, as
--          runtime.CorruptJob, and answers LEASE_LOST: lib/job.lua);
--          BAD_ARG for the whole call when ARGV is malformed

local worker = Check.token('worker', ARGV[1], LIMITS.worker_max)
if #ARGV % 5 ~= 1 then
  E.bad('complete takes a worker, then groups of jid, token, options, result and output')
end
local now_us = Clock.now_us()
local now_ms = Clock.ms(now_us)
local completed = {} -- K.completed's new entries (time us, jid, ...): one ZADD at the end

-- The options of a job sent none (read only, like every options table).
local NO_OPTIONS = { depends = {}, puts = {} }

-- The options, checked: {next, delay_ms, depends, note, puts (flat spec, data list)}.
local function options_of(jid, options_json)
  if options_json == '{}' then -- what a master sends for most jobs
    return NO_OPTIONS
  end
  local opts = Json.decode('options', options_json)
  local o = { next = Check.optional(opts.next), delay_ms = Check.optional(opts.delay_ms),
    note = Check.optional(opts.note), puts = {} }
  o.depends = Check.tokens('depends', Check.optional(opts.depends), LIMITS.jid_max,
    LIMITS.depends_max)
  if o.next == nil then
    if o.delay_ms ~= nil or #o.depends > 0 then
      E.bad('delay and depends need a next queue')
    end
  else
    Check.queue('next', o.next)
    if o.delay_ms ~= nil then
      Check.int('delay_ms', o.delay_ms, 0, LIMITS.delay_max_ms)
    end
    Deps.check(jid, o.depends)
  end
  if o.note ~= nil and type(o.note) ~= 'string' then
    E.bad('note must be text')
  end
  local puts = Check.optional(opts.puts) or {}
  if type(puts) ~= 'table' or #puts > LIMITS.puts_max then
    E.bad('puts must be a list of at most ' .. LIMITS.puts_max .. ' [spec, data] pairs')
  end
  for _, pair in ipairs(puts) do
    if type(pair) ~= 'table' or type(pair[1]) ~= 'string' or type(pair[2]) ~= 'string' then
      E.bad('each put must be a [spec JSON, data JSON] pair of texts')
    end
    o.puts[#o.puts + 1], o.puts[#o.puts + 2] = pair[1], pair[2]
  end
  return o
end

-- The job moves on to another queue, or runs once more; no result is kept.
local function move_on(jid, meta, data, o)
  local object = Attempt.keep_result(meta, data, nil)
  if o.next then
    Job.event(jid, meta, now_ms, 'completed', { w = worker, q = o.next, fq = meta.q, n = o.note })
    meta.q, meta.m, meta.a, meta.o = o.next, meta.r, nil, nil
    Place.enqueue(jid, meta, object, o.delay_ms and now_ms + o.delay_ms, now_us,
      Deps.add(jid, o.depends) > 0)
    Deps.fail_if_doomed(jid, meta, object, now_us)
  else -- a duplicate came while it ran (requeue_if_running): once more
    Job.event(jid, meta, now_ms, 'completed', { w = worker, n = Attempt.note('again', o.note) })
    meta.rq, meta.m, meta.a, meta.o = nil, meta.r, nil, nil
    Place.enqueue(jid, meta, object, nil, now_us, false)
  end
end

local function finish(jid, meta, data, result_text, note)
  local result, why = Attempt.result(result_text)
  Job.event(jid, meta, now_ms, 'completed',
    { w = worker, n = (note or why) and Attempt.note(note, why) or nil })
  meta.s, meta.o = COMPLETE, nil
  Stats.enter(jid, meta, now_us)
  Unique.release(jid, meta, meta.uf)
  completed[#completed + 1] = int(now_us)
  completed[#completed + 1] = jid
  Wait.notify(jid, meta, COMPLETE, now_ms)
  Job.save(jid, meta, Attempt.keep_result(meta, data, result))
  Place.release_dependents(jid, now_us)
end

local function complete(jid, token, options_json, result_text, output)
  local meta, data = Job.must(jid)
  if Lease.check(jid, meta, worker, token, 'complete', now_us) then
    return meta.s
  end
  local o = options_of(jid, options_json)
  local ok, jobs, refusal = true, {}, nil
  if #o.puts > 0 then
    ok, jobs, refusal = E.attempt(Create.check, o.puts, 1, now_ms, jid)
  end
  Lease.drop(jid, meta)
  Attempt.output(jid, meta, output)
  if not ok then
    meta.lr = 'complete'
    Stats.count(meta.q, 'failures', now_us)
    Place.fail(jid, meta, GROUP.PUT_REFUSED, 'a job it put was refused (' .. jobs .. '): '
      .. refusal .. '; nothing it put was kept, and no result', worker, now_us)
    Job.save(jid, meta, data)
    return meta.s
  end
  Stats.time(meta.q, 'run', (now_ms - (meta.pt or now_ms)) / 1000, now_us)
  meta.lr, meta.f = 'complete', nil
  if #jobs > 0 then
    local jids = {}
    for i, job in ipairs(jobs) do
      jids[i] = Create.job(job, now_us)
    end
    Job.event(jid, meta, now_ms, 'puts', Create.puts_event(jids))
  end
  if o.next or meta.rq then
    move_on(jid, meta, data, o)
  else
    finish(jid, meta, data, result_text, o.note)
  end
  return meta.s
end

local out = {}
for i = 2, #ARGV, 5 do
  out[#out + 1] = E.item(ARGV[i],
    E.attempt(complete, ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]))
end
if #completed > 0 then
  redis.call('ZADD', K.completed, unpack(completed))
  Retention.trim(now_us, LIMITS.retention_batch)
end
Stats.flush()
return '[' .. table.concat(out, ',') .. ']'
