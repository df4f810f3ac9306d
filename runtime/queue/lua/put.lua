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
local function parse(spec_json, data)
  return Create.parse(Json.decode('job spec', spec_json), data, now_ms)
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
local by_jid, adding = {}, {}
for _, job in ipairs(jobs) do
  by_jid[job.jid] = job
  for _, dep in ipairs(job.depends) do
    if dep == job.jid then
      E.bad('a job cannot depend on itself (' .. dep .. ')')
    end
    if not in_call[dep] and redis.call('HEXISTS', K.jobs, dep) == 0 then
      E.bad('unknown dependency ' .. dep)
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

-- 2. write
local jids = {}
for _, job in ipairs(jobs) do
  jids[#jids + 1] = Create.job(job, now_us)
end
return Json.array(jids)
