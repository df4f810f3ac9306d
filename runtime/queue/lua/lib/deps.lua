-- deps.lua: the dependency graph. K.deps(jid) holds the jids a job waits on,
-- K.dependents(jid) the jids waiting on it. A job with a non-empty deps set is
-- in state depends; the completion of its last dependency moves it on, once
-- (Place.release_dependents). No cycles: adding an edge that closes one is refused.

local Deps = {}

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
    if meta and meta.s ~= 'complete' then
      redis.call('SADD', K.deps(jid), dep)
      redis.call('SADD', K.dependents(dep), jid)
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
