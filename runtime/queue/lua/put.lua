-- put.lua: creates one or many jobs in one atomic step.
--
-- KEYS[1]  the namespace root, e.g. "{runtime}"
-- ARGV     spec_1, data_1, spec_2, data_2, ...
--          spec: JSON object with
--            jid, klass, queue      strings (klass "package.module:function")
--            priority               integer, lower pops first (default 0)
--            retries                integer >= 0 (default 5)
--            delay_ms | at_ms       integer ms from now | absolute epoch ms (not both)
--            tags, depends          lists of strings
--            domain, unique_key     strings or null
--            unique_for             seconds the key stays taken after completion
--            requeue_if_running     boolean: a duplicate while the holder runs asks
--                                   for one more run after it
--            backoff                [min s, max s] or null; timeout_s: number or null
--            tracked                boolean
--          data: the job's data, a JSON object as text
-- Reply    JSON list of the jids, in order (for a duplicate of a unique key:
--          the jid of the job holding it)
-- Errors   BAD_ARG, JOB_EXISTS. Every job is checked before the first write:
--          on an error nothing at all is written.

local now_us = Clock.now_us()
local now_ms = Clock.ms(now_us)
if #ARGV == 0 or #ARGV % 2 ~= 0 then
  E.bad('put takes pairs of job spec and data')
end
local max_data = Config.get('max-data-bytes')

local function optional_number(name, value, lo, hi)
  value = Check.optional(value)
  if value == nil then
    return nil
  end
  return Check.number(name, value, lo, hi, true)
end

local function parse(spec_json, data)
  local spec = Json.decode('job spec', spec_json)
  local job = {
    jid = Check.token('jid', spec.jid, LIMITS.jid_max),
    klass = Check.klass(spec.klass),
    queue = Check.queue('queue', spec.queue),
    priority = Check.int('priority', spec.priority or 0, LIMITS.priority_min, LIMITS.priority_max),
    retries = Check.int('retries', spec.retries or LIMITS.default_retries, 0, LIMITS.retries_max),
    tags = Check.tokens('tags', Check.optional(spec.tags), LIMITS.tag_max, LIMITS.tags_max),
    depends = Check.tokens('depends', Check.optional(spec.depends), LIMITS.jid_max,
      LIMITS.depends_max),
    domain = Check.optional(spec.domain),
    unique_key = Check.optional(spec.unique_key),
    unique_for = optional_number('unique_for', spec.unique_for, 0, 86400 * 365),
    requeue = spec.requeue_if_running == true,
    timeout_s = optional_number('timeout_s', spec.timeout_s, 0.001, 86400 * 365),
    tracked = spec.tracked == true,
    data = Check.data(data, max_data),
  }
  if job.domain ~= nil then
    Check.token('domain', job.domain, LIMITS.domain_max)
  end
  if job.unique_key ~= nil then
    Check.token('unique_key', job.unique_key, LIMITS.jid_max)
  end
  local delay, at = Check.optional(spec.delay_ms), Check.optional(spec.at_ms)
  if delay ~= nil and at ~= nil then
    E.bad('give delay or at, not both')
  elseif delay ~= nil then
    job.due_ms = now_ms + Check.int('delay_ms', delay, 0, LIMITS.delay_max_ms)
  elseif at ~= nil then
    job.due_ms = Check.int('at_ms', at, 0, now_ms + LIMITS.delay_max_ms)
  end
  local backoff = Check.optional(spec.backoff)
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

-- 1. check everything
local jobs, in_call = {}, {}
for i = 1, #ARGV, 2 do
  local job = parse(ARGV[i], ARGV[i + 1])
  if in_call[job.jid] or redis.call('HEXISTS', K.jobs, job.jid) == 1 then
    E.raise('JOB_EXISTS', 'a job with jid ' .. job.jid .. ' already exists')
  end
  in_call[job.jid] = true
  jobs[#jobs + 1] = job
end
for _, job in ipairs(jobs) do
  for _, dep in ipairs(job.depends) do
    if dep == job.jid then
      E.bad('a job cannot depend on itself (' .. dep .. ')')
    end
    if not in_call[dep] and redis.call('HEXISTS', K.jobs, dep) == 0 then
      E.bad('unknown dependency ' .. dep)
    end
  end
end

-- 2. write
local jids = {}
local function create(job)
  local jid = job.jid
  local meta = {
    k = job.klass, q = job.queue, r = job.retries, m = job.retries,
    h = { { e = 'put', t = now_ms, q = job.queue } },
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
  if #job.tags > 0 then
    local tags, seen = {}, {}
    for _, tag in ipairs(job.tags) do
      if not seen[tag] then
        seen[tag] = true
        tags[#tags + 1] = tag
        redis.call('ZADD', K.tag(tag), now_ms, jid)
      end
    end
    meta.g = tags
  end
  if job.tracked then
    meta.tr = 1
    redis.call('ZADD', K.tracked, now_ms, jid)
  end
  for _, dep in ipairs(job.depends) do
    if in_call[dep] or Job.load(dep).s ~= 'complete' then
      redis.call('SADD', K.deps(jid), dep)
      redis.call('SADD', K.dependents(dep), jid)
    end
  end
  Place.enqueue(jid, meta, job.data, job.due_ms, now_us, #job.depends > 0)
  return jid
end
for _, job in ipairs(jobs) do
  jids[#jids + 1] = job.unique_key and Unique.holder(job.unique_key, job.requeue) or create(job)
end
return Json.array(jids)
