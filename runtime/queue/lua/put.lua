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
--            batch                  the bid of a batch the job joins (lib/batch.lua):
--                                   an open one, or a sealed one when `by` is a
--                                   job of it that has not ended
--            traceparent            the W3C traceparent of the span that put it
--                                   (text, at most 64 bytes), kept as meta.tp
--            expires_in_ms          integer >= 1: not started this many ms after its due
--                                   time, it fails as runtime.Expired (place.lua)
--            debounce_ms            integer >= 1, with unique_key, without delay, at
--                                   or requeue_if_running: due this many ms from now; a
--                                   holder of the key that has not started takes this
--                                   put's data and due time instead (create.lua)
--            by                     the jid of the job putting it (a running job's
--                                   put that goes at once): recorded in its put
--                                   event, and that job's history counts it ("puts")
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
local jobs = Create.check(ARGV, 1, now_ms)
local jids, parents, by_parent = {}, nil, nil -- the jobs putting them, if any
for _, job in ipairs(jobs) do
  local jid = Create.job(job, now_us)
  jids[#jids + 1] = jid
  if job.by then
    if not parents then
      parents, by_parent = {}, {}
    end
    if not by_parent[job.by] then
      by_parent[job.by] = {}
      parents[#parents + 1] = job.by
    end
    table.insert(by_parent[job.by], jid)
  end
end
-- the jobs that put them count them in their history (a parent gone is skipped)
if parents then
  for _, parent in ipairs(parents) do
    local meta, data = Job.load(parent)
    if meta then
      Job.event(parent, meta, now_ms, 'puts', Create.puts_event(by_parent[parent]))
      Job.save(parent, meta, data)
    end
  end
end
return Json.array(jids)
