-- report.lua: a lease holder's reports on its jobs, shared by the operations
-- that send them alone (complete.lua, retry.lua, fail.lua) and by a master's
-- exchange (exchange.lua, then a pop in the same call).
--
-- Report.complete / retry / fail(worker, args, first, last, now_us, completed)
-- apply the rows args[first .. last] (6, 7 and 6 values a job, as the
-- operations' headers say) and return the reply entries, one per job, in
-- order (E.item text). A job's coded error (LEASE_LOST, NO_SUCH_JOB, BAD_ARG)
-- is its entry only; the others go on. `completed` (complete only) gathers
-- K.completed's new entries (time us, jid, ...) for Place.list_completed, once a
-- call.

local Report = {}

-- A run of reports on the jobs of args[first .. last] (`step` values a job)
-- writes their worker's set once (Place.gather_holders, then
-- Place.write_holders when the run is done). Returns the run's jids.
local function run_begins(args, first, last, step)
  local jids = {}
  for i = first, last, step do
    jids[#jids + 1] = args[i]
  end
  Place.gather_holders()
  return jids
end

-- The options of a job sent none (read only, like every options table).
local NO_OPTIONS = { depends = {}, puts = {} }

-- A completion's options, checked: {next, delay_ms, depends, note, puts (flat spec, data list)}.
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

-- Keeps the attempt's usage (nil: none measured, e.g. its child crashed) on the
-- record (lib/attempt.lua), and counts it in the statistics of its queue and
-- klass (lib/stats.lua).
local function keep_usage(meta, usage, now_us)
  meta.u = usage
  if usage then
    Stats.usage(meta.q, meta.k, usage[1], usage[2], now_us)
  end
end

-- The job moves on to another queue, or runs once more; no result is kept.
local function move_on(jid, meta, data, o, worker, now_us)
  local now_ms = Clock.ms(now_us)
  local object = Attempt.keep_result(meta, data, nil)
  if o.next then
    Job.event(jid, meta, now_ms, 'completed',
      { w = worker, q = o.next, fq = meta.q, n = o.note, u = meta.u })
    meta.q, meta.m, meta.a, meta.o = o.next, meta.r, nil, nil
    Place.enqueue(jid, meta, object, o.delay_ms and now_ms + o.delay_ms, now_us,
      Deps.add(jid, o.depends) > 0)
    Deps.fail_if_doomed(jid, meta, object, now_us)
  else -- a duplicate came while it ran (requeue_if_running): once more
    Job.event(jid, meta, now_ms, 'completed',
      { w = worker, n = Attempt.note('again', o.note), u = meta.u })
    meta.rq, meta.m, meta.a, meta.o = nil, meta.r, nil, nil
    Place.enqueue(jid, meta, object, nil, now_us, false)
  end
end

local function finish(jid, meta, data, result_text, note, worker, now_us, completed)
  local now_ms = Clock.ms(now_us)
  local result, why = Attempt.result(result_text)
  Job.event(jid, meta, now_ms, 'completed',
    { w = worker, n = (note or why) and Attempt.note(note, why) or nil, u = meta.u })
  Place.to_complete(jid, meta, now_us, completed)
  Unique.release(jid, meta, meta.uf)
  Wait.notify(jid, meta, COMPLETE, now_ms)
  Job.save(jid, meta, Attempt.keep_result(meta, data, result))
  Place.release_dependents(jid, now_us)
end

local function complete(worker, now_us, completed, jid, token, options_json, result_text, output,
                         usage_text)
  local meta, data = Job.must(jid)
  if Lease.check(jid, meta, worker, token, 'complete', now_us) then
    return meta.s
  end
  local now_ms = Clock.ms(now_us)
  local o = options_of(jid, options_json)
  local usage = Attempt.usage(usage_text)
  local ok, jobs, refusal = true, {}, nil
  if #o.puts > 0 then
    ok, jobs, refusal = E.attempt(Create.check, o.puts, 1, now_ms, jid)
  end
  Place.drop_lease(jid, meta)
  Attempt.output(jid, meta, output)
  keep_usage(meta, usage, now_us)
  if not ok then
    meta.lr = 'complete'
    Stats.count(meta.q, 'failures', now_us)
    Place.fail(jid, meta, GROUP.PUT_REFUSED, 'a job it put was refused (' .. jobs .. '): '
      .. refusal .. '; nothing it put was kept, and no result', worker, now_us, usage)
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
    move_on(jid, meta, data, o, worker, now_us)
  else
    finish(jid, meta, data, result_text, o.note, worker, now_us, completed)
  end
  return meta.s
end

function Report.complete(worker, args, first, last, now_us, completed)
  local out = {}
  Place.look_for_dependents(run_begins(args, first, last, 6))
  for i = first, last, 6 do
    out[#out + 1] = E.item(args[i], E.attempt(complete, worker, now_us, completed, args[i],
      args[i + 1], args[i + 2], args[i + 3], args[i + 4], args[i + 5]))
  end
  Place.write_holders()
  return out
end

local function fail(worker, now_us, jid, token, group, message, output, usage_text)
  local meta, data = Job.must(jid)
  if Lease.check(jid, meta, worker, token, 'fail', now_us) then
    return meta.s
  end
  Check.token('group', group, LIMITS.group_max)
  local usage = Attempt.usage(usage_text)
  Place.drop_lease(jid, meta)
  Attempt.output(jid, meta, output)
  keep_usage(meta, usage, now_us)
  meta.lr = 'fail'
  Stats.count(meta.q, 'failures', now_us)
  Place.fail(jid, meta, group, message, worker, now_us, usage)
  Job.save(jid, meta, data)
  return meta.s
end

function Report.fail(worker, args, first, last, now_us)
  local out = {}
  run_begins(args, first, last, 6)
  for i = first, last, 6 do
    out[#out + 1] = E.item(args[i], E.attempt(fail, worker, now_us, args[i], args[i + 1],
      args[i + 2], args[i + 3], args[i + 4], args[i + 5]))
  end
  Place.write_holders()
  return out
end

local function backoff_ms(jid, meta)
  local lo = meta.bo and meta.bo[1] or Config.get('backoff-min', meta.q)
  local hi = meta.bo and meta.bo[2] or Config.get('backoff-max', meta.q)
  local spent = meta.r - meta.m -- retries used before this one
  local base = math.min(hi, lo * 2 ^ math.min(spent, 60))
  local jitter = tonumber(string.sub(redis.sha1hex(jid .. ':' .. (meta.a or 0)), 1, 8), 16) / 4294967296
  local delay = math.max(lo, math.min(hi, base * (0.5 + 0.5 * jitter)))
  return math.floor(delay * 1000)
end

local function retry(worker, now_us, jid, token, group, message, delay_arg, output, usage_text)
  local meta, data = Job.must(jid)
  if Lease.check(jid, meta, worker, token, 'retry', now_us) then
    return meta.s
  end
  local now_ms = Clock.ms(now_us)
  Check.token('group', group, LIMITS.group_max)
  local delay_ms = Check.int('delay_ms', delay_arg, -1, LIMITS.delay_max_ms)
  local usage = Attempt.usage(usage_text)
  Place.drop_lease(jid, meta)
  Attempt.output(jid, meta, output)
  keep_usage(meta, usage, now_us)
  meta.lr = 'retry'
  Stats.count(meta.q, 'failures', now_us)
  if meta.m <= 0 then
    Place.fail(jid, meta, group, message, worker, now_us, usage)
    Job.save(jid, meta, data)
    return meta.s
  end
  if delay_ms < 0 then
    delay_ms = backoff_ms(jid, meta)
  end
  Stats.count(meta.q, 'retries', now_us)
  meta.m = meta.m - 1
  meta.f = { g = group, m = Job.cap_message(message), t = now_ms, w = worker }
  Job.event(jid, meta, now_ms, 'retried',
    { w = worker, g = group, dl = delay_ms, n = Job.failure_note(group, message), u = usage })
  Place.enqueue(jid, meta, data, now_ms + delay_ms, now_us, false)
  return meta.s
end

function Report.retry(worker, args, first, last, now_us)
  local out = {}
  run_begins(args, first, last, 7)
  for i = first, last, 7 do
    out[#out + 1] = E.item(args[i], E.attempt(retry, worker, now_us, args[i], args[i + 1],
      args[i + 2], args[i + 3], args[i + 4], args[i + 5], args[i + 6]))
  end
  Place.write_holders()
  return out
end
