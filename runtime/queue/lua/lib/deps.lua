-- deps.lua: the dependency graph. K.deps(jid) holds the jids a job waits on,
-- K.dependents(jid) the jids waiting on it. A job with a non-empty deps set is
-- in state depends; the completion of its last dependency moves it on, once
-- (Place.release_dependents). No cycles: adding an edge that closes one is refused.
--
-- Failure cascades: when a job fails for good (Place.fail, Place.corrupt), each
-- job in depends waiting on it fails as runtime.DependencyFailed, its message
-- naming that job, and so on down the graph (Deps.fail_dependents). The edges
-- stay: when the failed job runs again (unfail, requeue), the jobs that failed
-- that way waiting on it return to depends, unless another job they wait on is
-- still failed, and so on down (Deps.restore). Both walks examine at most
-- graph_max dependents per call; the rest stay as they are. A job that would
-- wait on a job already failed (put, depends on, complete with next) fails at
-- once the same way (Deps.fail_if_doomed).

local Deps = {}
local examined, examined_call = 0, 0 -- dependents the walks of call examined_call examined

-- True when `jid` is reachable from any of `starts` along deps edges (so making
-- jid wait on them would close a cycle). Walks at most graph_max jobs.
function Deps.reaches(starts, jid)
  local seen, stack, walked = {}, {}, 0
  for _, start in ipairs(starts) do
    stack[#stack + 1] = start
  end
  while #stack > 0 do
    local node = table.remove(stack)
    if node == jid then
      return true
    end
    if not seen[node] then
      seen[node] = true
      walked = walked + 1
      if walked > LIMITS.graph_max then
        E.bad('the dependency graph is too large to check for cycles')
      end
      for _, next_node in ipairs(redis.call('SMEMBERS', K.deps(node))) do
        stack[#stack + 1] = next_node
      end
    end
  end
  return false
end

-- Refuses `adding` new dependents of `dep` beyond graph_max: the completion of
-- dep releases all of them in one call (Place.release_dependents).
function Deps.check_dependents(dep, adding)
  if redis.call('SCARD', K.dependents(dep)) + adding > LIMITS.graph_max then
    E.bad(dep .. ' would have more than ' .. LIMITS.graph_max .. ' jobs waiting on it')
  end
end

-- Checks new dependencies of `jid`: known jobs, not itself, no cycle, room.
function Deps.check(jid, deps)
  for _, dep in ipairs(deps) do
    if dep == jid then
      E.bad('a job cannot depend on itself (' .. dep .. ')')
    elseif redis.call('HEXISTS', K.jobs, dep) == 0 then
      E.bad('unknown dependency ' .. dep)
    elseif Place.tombstone(dep) then
      E.bad('dependency ' .. dep .. ' was cancelled')
    elseif redis.call('SISMEMBER', K.dependents(dep), jid) == 0 then
      Deps.check_dependents(dep, 1)
    end
  end
  if #deps > 0 and Deps.reaches(deps, jid) then
    E.bad('dependency cycle: ' .. jid .. ' would wait on a job that waits on it')
  end
end

-- Adds edges jid -> dep for the deps not complete yet; returns how many.
function Deps.add(jid, deps)
  local added = 0
  for _, dep in ipairs(deps) do
    local meta = Job.load(dep)
    if meta and meta.s ~= COMPLETE then
      Place.link_dependency(jid, dep)
      added = added + 1
    end
  end
  return added
end

function Deps.remove(jid, deps)
  for _, dep in ipairs(deps) do
    redis.call('SREM', K.deps(jid), dep)
    redis.call('SREM', K.dependents(dep), jid)
  end
end

-- The first job `jid` waits on that failed for good, and its group; nil if none.
function Deps.failed_parent(jid)
  for _, dep in ipairs(redis.call('SMEMBERS', K.deps(jid))) do
    local meta = Job.load(dep)
    if meta and meta.s == FAILED then
      return dep, meta.f.g
    end
  end
  return nil
end

-- A job in depends fails because `parent` failed for good (with group `why`).
local function fail_waiting(jid, meta, data, parent, why, now_us)
  Place.remove(jid, meta)
  Place.to_failed(jid, meta, GROUP.DEPENDENCY_FAILED, 'job ' .. parent
    .. ', which it depends on, failed for good (' .. why .. ')', nil, now_us)
  Job.save(jid, meta, data)
end

-- The dependents of each job of `todo` (pairs: jid, group), breadth first:
-- visit(other, parent, group) returns the group to walk on with, or nil.
local function walk(todo, visit)
  local i = 1
  while i < #todo do
    local parent, why = todo[i], todo[i + 1]
    i = i + 2
    for _, other in ipairs(redis.call('SMEMBERS', K.dependents(parent))) do
      if examined_call ~= CALL then
        examined, examined_call = 0, CALL
      end
      if examined >= LIMITS.graph_max then
        return
      end
      examined = examined + 1
      local next_why = visit(other, parent, why)
      if next_why then
        todo[#todo + 1] = other
        todo[#todo + 1] = next_why
      end
    end
  end
end

-- `root` failed for good with `group`: the jobs in depends waiting on it fail,
-- and so on down.
function Deps.fail_dependents(root, group, now_us)
  walk({ root, group }, function(other, parent, why)
    local meta, data = Job.load(other)
    if meta and meta.s == DEPENDS then
      fail_waiting(other, meta, data, parent, why, now_us)
      return GROUP.DEPENDENCY_FAILED
    end
    return nil
  end)
end
Place.cascade = Deps.fail_dependents

-- `root` runs again: the jobs that failed as runtime.DependencyFailed waiting
-- on it, and waiting on no other failed job, return to depends; so on down.
function Deps.restore(root, now_us)
  local now_ms = Clock.ms(now_us)
  walk({ root, '' }, function(other, parent)
    local meta, data = Job.load(other)
    if not (meta and meta.s == FAILED and meta.f.g == GROUP.DEPENDENCY_FAILED)
        or Deps.failed_parent(other) then
      return nil
    end
    Job.event(other, meta, now_ms, 'unfailed', { n = 'job ' .. parent .. ' runs again' })
    Place.depend_again(other, meta, now_us)
    Job.save(other, meta, data)
    return ''
  end)
end

-- A job that runs again by hand (unfail, requeue) no longer waits on the jobs
-- it waits on that failed: it runs without them.
function Deps.drop_failed(jid)
  for _, dep in ipairs(redis.call('SMEMBERS', K.deps(jid))) do
    local meta = Job.load(dep)
    if meta and meta.s == FAILED then
      Deps.remove(jid, { dep })
    end
  end
end

-- A job just put in depends that waits on a job already failed fails at once.
-- Returns true if it did (the record is saved).
function Deps.fail_if_doomed(jid, meta, data, now_us)
  if meta.s ~= DEPENDS then
    return false
  end
  local parent, why = Deps.failed_parent(jid)
  if not parent then
    return false
  end
  fail_waiting(jid, meta, data, parent, why, now_us)
  Place.cascade(jid, GROUP.DEPENDENCY_FAILED, now_us)
  return true
end
