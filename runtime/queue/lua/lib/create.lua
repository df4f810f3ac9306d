-- create.lua: a new job from its spec: checked (Create.parse, Create.check,
-- before anything is written) and written (Create.job). Shared by put, by the
-- puts that go with a completion (complete.lua) and by recurring jobs.

local Create = {}

-- No tags, no dependencies: one shared empty list, never written to.
local NONE = {}

-- The job described by a decoded spec (see put.lua) and its data text; raises BAD_ARG.
-- Options a spec leaves out cost nothing: their checks run only on values given,
-- and the job's table is made once, with room for the fields every job has.
function Create.parse(spec, data, now_ms)
  local null = cjson.null
  local jid = Check.token('jid', spec.jid, LIMITS.jid_max)
  local klass = Check.klass(spec.klass)
  local queue = Check.queue('queue', spec.queue)
  local priority, retries, tags, depends = 0, LIMITS.default_retries, NONE, NONE
  local value = spec.priority
  if value then -- as `spec.priority or 0`: absent or false is the default
    priority = Check.int('priority', value, LIMITS.priority_min, LIMITS.priority_max)
  end
  value = spec.retries
  if value then
    retries = Check.int('retries', value, 0, LIMITS.retries_max)
  end
  value = spec.tags
  if value ~= nil and value ~= null then
    tags = Check.tokens('tags', value, LIMITS.tag_max, LIMITS.tags_max)
  end
  value = spec.depends
  if value ~= nil and value ~= null then
    depends = Check.tokens('depends', value, LIMITS.jid_max, LIMITS.depends_max)
  end
  local unique_for, timeout_s = spec.unique_for, spec.timeout_s
  if unique_for == null then
    unique_for = nil
  elseif unique_for ~= nil then
    unique_for = Check.number('unique_for', unique_for, 0, 86400 * 365, true)
  end
  if timeout_s == null then
    timeout_s = nil
  elseif timeout_s ~= nil then
    timeout_s = Check.number('timeout_s', timeout_s, 0.001, 86400 * 365, true)
  end
  local job = {
    jid = jid, klass = klass, queue = queue, priority = priority, retries = retries,
    tags = tags, depends = depends, requeue = spec.requeue_if_running == true,
    tracked = spec.tracked == true, data = Check.data(data, Config.get('max-data-bytes')),
    by = nil, -- room for the caller's (Create.check)
  }
  value = spec.by
  if value ~= nil and value ~= null then
    job.by = Check.token('by', value, LIMITS.jid_max)
  end
  value = spec.batch
  if value ~= nil and value ~= null then
    job.batch = Check.token('batch', value, LIMITS.jid_max)
  end
  value = spec.domain
  if value ~= nil and value ~= null then
    job.domain = Check.token('domain', value, LIMITS.domain_max)
  end
  value = spec.unique_key
  if value ~= nil and value ~= null then
    job.unique_key = Check.token('unique_key', value, LIMITS.jid_max)
  end
  value = spec.traceparent
  if value ~= nil and value ~= null then -- W3C trace context of the put's span
    if type(value) ~= 'string' or #value > 64
        or not string.match(value, '^%x%x%-%x+%-%x+%-%x%x$') then
      E.bad('traceparent must be a W3C traceparent (version-trace-parent-flags, hex)')
    end
    job.traceparent = value
  end
  job.unique_for, job.timeout_s = unique_for, timeout_s
  -- (JSON null is left out, as by Check.optional, inline: a put's every
  -- function call counts, and most of these options are absent)
  local delay, at = spec.delay_ms, spec.at_ms
  if delay == null then
    delay = nil
  end
  if at == null then
    at = nil
  end
  if delay ~= nil and at ~= nil then
    E.bad('give delay or at, not both')
  elseif delay ~= nil then
    job.due_ms = now_ms + Check.int('delay_ms', delay, 0, LIMITS.delay_max_ms)
  elseif at ~= nil then
    job.due_ms = Check.int('at_ms', at, 0, now_ms + LIMITS.delay_max_ms)
  end
  value = spec.expires_in_ms
  if value == null then
    value = nil
  end
  if value ~= nil then
    job.expires_in_ms = Check.int('expires_in_ms', value, 1, LIMITS.delay_max_ms)
  end
  value = spec.debounce_ms
  if value == null then
    value = nil
  end
  if value ~= nil then
    job.debounce_ms = Check.int('debounce_ms', value, 1, LIMITS.delay_max_ms)
    if not job.unique_key then
      E.bad('debounce needs a unique_key')
    elseif job.due_ms or job.requeue then
      E.bad('give debounce without delay, at or requeue_if_running')
    end
    job.due_ms = now_ms + job.debounce_ms
  end
  local backoff = spec.backoff
  if backoff == null then
    backoff = nil
  end
  if backoff ~= nil then
    if type(backoff) ~= 'table' or #backoff ~= 2 then
      E.bad('backoff must be [min seconds, max seconds]')
    end
    local lo = Check.number('backoff min', backoff[1], 0, LIMITS.delay_max_ms / 1000, true)
    local hi = Check.number('backoff max', backoff[2], lo, LIMITS.delay_max_ms / 1000, true)
    job.backoff = { lo, hi }
  end
  return job
end

-- Checks the jobs of one put (`args`: spec JSON, data text, spec, data ...,
-- from index `first`) before anything is written: each spec, no jid taken,
-- dependencies known, within graph_max dependents, no cycle among them. `by`:
-- the job putting them, if not in their specs. Returns the parsed jobs;
-- raises BAD_ARG or JOB_EXISTS.
function Create.check(args, first, now_ms, by)
  local jobs, in_call, depending = {}, {}, false
  for i = first, #args, 2 do
    local job = Create.parse(Json.decode('job spec', args[i]), args[i + 1], now_ms)
    job.by = job.by or by
    if in_call[job.jid] then
      E.raise('JOB_EXISTS', 'a job with jid ' .. job.jid .. ' already exists')
    elseif redis.call('HEXISTS', K.jobs, job.jid) == 1 then
      job.tomb = Place.tombstone(job.jid) -- a cancelled job's jid may be put anew
        or E.raise('JOB_EXISTS', 'a job with jid ' .. job.jid .. ' already exists')
    end
    in_call[job.jid] = true
    jobs[#jobs + 1] = job
    if job.batch then
      Create.check_batch(job.batch, job.by) -- lib/batch.lua
    end
    depending = depending or #job.depends > 0
  end
  if not depending then -- nothing below to check
    return jobs
  end
  local by_jid, adding = {}, {}
  for _, job in ipairs(jobs) do
    by_jid[job.jid] = job
    for _, dep in ipairs(job.depends) do
      if dep == job.jid then
        E.bad('a job cannot depend on itself (' .. dep .. ')')
      end
      if not in_call[dep] and redis.call('HEXISTS', K.jobs, dep) == 0 then
        dep = Unique.folded_into(dep) or E.bad('unknown dependency ' .. dep)
      elseif not in_call[dep] and Place.tombstone(dep) then
        E.bad('dependency ' .. dep .. ' was cancelled')
      end
      adding[dep] = (adding[dep] or 0) + 1
      Deps.check_dependents(dep, adding[dep])
    end
  end
  -- jobs of one call may wait on each other, but not in a circle
  local done, active = {}, {}
  local function visit(jid)
    if active[jid] then
      E.bad('dependency cycle through ' .. jid)
    end
    if not done[jid] and by_jid[jid] then
      active[jid] = true
      for _, dep in ipairs(by_jid[jid].depends) do
        visit(dep)
      end
      active[jid], done[jid] = nil, true
    end
  end
  for _, job in ipairs(jobs) do
    visit(job.jid)
  end
  return jobs
end

-- The history event of a job that put `jids`: their count and the first few.
function Create.puts_event(jids)
  local kept = {}
  for i = 1, math.min(#jids, LIMITS.put_jids_kept) do
    kept[i] = jids[i]
  end
  return { c = #jids, j = kept }
end

-- A debounced put (debounce_ms, with a unique key) meets `holder`, the job
-- holding its key: one that has not started takes the put's data and moves
-- its due time to now + debounce (Place.debounce). Returns started (the
-- holder has started: the put makes a new job) and, while the holder runs,
-- its jid: the new job waits for that run to end (meta.af, Place.promote).
function Create.debounce(holder, job, now_us)
  local meta, data = Job.load(holder)
  if not meta or meta.s == COMPLETE then
    return true, nil
  elseif meta.s == RUNNING then
    return true, holder
  end
  Place.debounce(holder, meta, job.data, job.due_ms, job.expires_in_ms, now_us)
  return false, nil
end

-- Writes a checked job; returns its jid, or the jid of the job holding its unique key
-- (a running job's put, whose jid that job already has, is folded into it: unique.lua).
function Create.job(job, now_us)
  local after -- a debounced put's running holder: the new job waits for its run
  if job.unique_key then
    local holder = Unique.holder(job.unique_key, job.requeue)
    if holder and job.debounce_ms then
      local started
      started, after = Create.debounce(holder, job, now_us)
      if not started then
        return holder
      end
    elseif holder then
      if job.by and holder ~= job.jid then
        Unique.fold(job.jid, holder)
      end
      return holder
    end
  end
  local jid, now_ms = job.jid, Clock.ms(now_us)
  if job.tomb then
    Place.delete(jid, job.tomb)
  end
  local meta = {
    k = job.klass, q = job.queue, r = job.retries, m = job.retries,
    -- its queue: meta.q, or the first move's fq
    h = Job.first_event('put', now_ms, job.by and { b = job.by } or nil),
    s = nil, d = nil, o = nil, qt = nil, -- room for what Place.enqueue sets (no rehash)
  }
  if job.priority ~= 0 then
    meta.p = job.priority
  end
  if job.domain then
    meta.dm = job.domain
  end
  if job.unique_key then
    meta.uk, meta.uf = job.unique_key, job.unique_for
    Unique.claim(job.unique_key, jid)
  end
  if job.backoff then
    meta.bo = job.backoff
  end
  if job.timeout_s then
    meta.to = job.timeout_s
  end
  if job.batch then
    meta.b = job.batch
  end
  if job.traceparent then
    meta.tp = job.traceparent
  end
  if job.expires_in_ms then
    meta.x, meta.xi = (job.due_ms or now_ms) + job.expires_in_ms, job.expires_in_ms
  end
  if after then
    meta.af, meta.db = after, job.debounce_ms
  end
  if #job.tags > 0 then
    local tags, seen = {}, {}
    for _, tag in ipairs(job.tags) do
      if not seen[tag] then
        seen[tag] = true
        tags[#tags + 1] = tag
        redis.call('ZADD', K.tag(tag), int(now_ms), jid)
      end
    end
    meta.g = tags
  end
  if job.tracked then
    meta.tr = 1
    redis.call('ZADD', K.tracked, int(now_ms), jid)
    Job.publish(jid, meta, { e = 'put', t = now_ms })
  end
  local depending = #job.depends > 0
  for _, dep in ipairs(job.depends) do -- jobs of the same put may not exist yet
    local dep_meta = Job.load(dep)
    if not dep_meta then -- or it was folded into the holder of its unique key
      dep = Unique.folded_into(dep) or dep
      dep_meta = Job.load(dep)
    end
    if not dep_meta or dep_meta.s ~= COMPLETE then
      Place.link_dependency(jid, dep)
    end
  end
  Json.vouch(meta) -- made of checked parts, like its data (Check.data)
  Place.enqueue(jid, meta, job.data, job.due_ms, now_us, depending, now_ms)
  if depending then
    Deps.fail_if_doomed(jid, meta, job.data, now_us)
  end
  return jid
end
