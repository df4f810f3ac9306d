-- sweep.lua: the walks over an index that find the jobs to move, and move
-- them through place.lua (which alone writes states and indexes):
--
--   Place.promote             the queue's due scheduled jobs into their lanes
--   Place.take_soon           scheduled jobs due within a pop's look-ahead, leased
--   Place.reclaim             jobs whose lease expired, back to waiting or failed
--   Place.release_dependents  the jobs that waited on a completed job, moved on
--
-- Each drops the entries it meets whose job is corrupt (failed: Place.corrupt),
-- gone or no longer in that state, so no entry is met twice.

do -- this file's own locals end with it: a library's main chunk holds at most 200

-- True for a record read as (meta, data, ...) by Job.read that is sound and in
-- `state` in `queue`; else a corrupt one is failed (taken out of `queue`'s
-- index by the caller) and false returned: the caller drops the entry.
local function in_state(jid, state, queue, meta, problem, raw, sound_meta)
  if meta and meta.s == state and meta.q == queue then
    return true
  end
  if meta == false then
    Job.corrupt(jid, problem, raw, sound_meta, queue)
  end
  return false
end

-- Moves the queue's due scheduled jobs into their lanes, earliest due first.
function Place.promote(queue, now_us)
  if not Place.promoting(queue) then
    return
  end
  local key = K.scheduled(queue)
  local bound = Clock.ms(now_us) * 1000 -- due times are whole milliseconds
  -- the earliest first, alone: as a rule none is due (or there are none), and
  -- this read costs less than the range (and its bound, formatted)
  local first = redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')
  if #first == 0 or tonumber(first[2]) > bound then
    return
  end
  local members = redis.call('ZRANGEBYSCORE', key, '-inf', int(bound), 'LIMIT', '0',
    int(LIMITS.promote_batch))
  if #members == 0 then
    return
  end
  Place.unschedule(queue, unpack(members))
  for _, member in ipairs(members) do
    local jid = Place.scheduled_jid(member)
    local meta, data, raw, sound_meta = Job.read(jid)
    if in_state(jid, SCHEDULED, queue, meta, data, raw, sound_meta) then
      if meta.x and now_us > meta.x * 1000 then
        Place.expire(jid, meta, data, now_us)
      elseif meta.af and Place.after_running(meta) then
        Place.enqueue(jid, meta, data, Clock.ms(now_us) + meta.db, now_us, false)
      else
        Place.to_waiting(jid, meta, now_us, false)
        Job.save(jid, meta, data)
      end
    end
  end
  Place.wake(queue)
end

-- A debounced job put while the holder of its key ran (meta.af, lib/unique.lua)
-- waits for that run to end: true while it runs (its promotion is then put off
-- by its debounce again, meta.db ms); false, and the mark gone, once it ended.
function Place.after_running(meta)
  local other = Job.load(meta.af)
  if other and other.s == RUNNING then
    return true
  end
  meta.af, meta.db = nil, nil
  return false
end

-- Scheduled jobs of the queue that come due within ahead_us, taken straight to
-- the caller in (due, put) order: take(jid, meta, data, due_us) leases each, to
-- start at its due time. Jobs with a domain wait for their promotion: their
-- start is the domain's to give. Each gets its lane's order ticket, as its
-- promotion would have given it: a job given back or reclaimed goes to the head
-- of its lane, which needs one. Returns how many were taken.
function Place.take_soon(queue, now_us, ahead_us, room, take)
  local key = K.scheduled(queue)
  local found = redis.call('ZRANGEBYSCORE', key, '-inf', int(now_us + ahead_us), 'WITHSCORES',
    'LIMIT', '0', int(room + LIMITS.pop_skips))
  local taken = 0
  for i = 1, #found, 2 do
    if taken >= room then
      break
    end
    local member = found[i]
    local jid = Place.scheduled_jid(member)
    local meta, data, raw, sound_meta = Job.read(jid, true) -- its data goes in a reply
    if not in_state(jid, SCHEDULED, queue, meta, data, raw, sound_meta) then
      Place.unschedule(queue, member)
    elseif meta.x and now_us > meta.x * 1000 then -- overdue past its deadline
      Place.unschedule(queue, member)
      Place.expire(jid, meta, data, now_us)
    elseif not (meta.dm or meta.af) then -- (those wait for their promotion)
      Place.unschedule(queue, member)
      meta.d, meta.qt = nil, Clock.ms(tonumber(found[i + 1]))
      meta.o = redis.call('HINCRBY', K.queue(queue), 'seq', 1)
      take(jid, meta, data, tonumber(found[i + 1]))
      taken = taken + 1
    end
  end
  return taken
end

-- Whether a call's completions may find jobs waiting on them: a completion
-- of many jobs asks once for all of them (Place.look_for_dependents, one
-- EXISTS), not once a job; an edge added later in the call (a completion's
-- next with depends, a job it puts) makes every completion of the call look.
local none_waiting = 0 -- the call whose completions no job waits on (CALL), 0: none

function Place.look_for_dependents(jids)
  if #jids < 2 or #jids > LIMITS.pop_max then -- unpack takes at most ~8000 values
    return
  end
  local keys = {}
  for i, jid in ipairs(jids) do
    keys[i] = K.dependents(jid)
  end
  if redis.call('EXISTS', unpack(keys)) == 0 then
    none_waiting = CALL
  end
end

-- `jid` waits on `dep` (Deps.check checked the edge): the one way an edge is added.
function Place.link_dependency(jid, dep)
  redis.call('SADD', K.deps(jid), dep)
  redis.call('SADD', K.dependents(dep), jid)
  none_waiting = 0
end

-- A job completed: each job waiting on it that waits on nothing else moves on, once.
-- A job has at most graph_max dependents (Deps.check_dependents, where edges are added).
function Place.release_dependents(jid, now_us)
  if none_waiting == CALL then
    return
  end
  local key = K.dependents(jid)
  local others = redis.call('SRANDMEMBER', key, int(LIMITS.graph_max))
  if #others == 0 then
    return
  end
  for _, other in ipairs(others) do
    local deps = K.deps(other)
    redis.call('SREM', deps, jid)
    if redis.call('SCARD', deps) == 0 then
      local meta, data = Job.load(other)
      if meta and meta.s == DEPENDS then
        Place.remove(other, meta)
        Place.enqueue(other, meta, data, meta.d, now_us, false)
      end
    end
  end
  redis.call('DEL', key)
end

-- Jobs whose lease expired go back to the head of their lane, one retry spent,
-- or fail when none is left. At most `count` per call. Leases that expired
-- during or after an outage stay while its grace lasts (Grace, lease.lua).
function Place.reclaim(queue, now_us, count)
  local key = K.running(queue)
  local jids = redis.call('ZRANGEBYSCORE', key, '-inf', int(now_us), 'LIMIT', '0', int(count))
  if #jids == 0 then
    return 0
  end
  local bound_us = Grace.reclaim_bound(queue, now_us)
  if bound_us < now_us then
    jids = redis.call('ZRANGEBYSCORE', key, '-inf', int(bound_us), 'LIMIT', '0', int(count))
  end
  for _, jid in ipairs(jids) do
    local meta, data, raw, sound_meta = Job.read(jid)
    if in_state(jid, RUNNING, queue, meta, data, raw, sound_meta) then
      local worker = meta.w
      Place.drop_lease(jid, meta)
      Job.event(jid, meta, Clock.ms(now_us), 'lease-lost', { w = worker })
      Stats.count(queue, 'failures', now_us)
      if meta.m <= 0 then
        Place.fail(jid, meta, GROUP.LEASE_EXPIRED,
          'lease expired: worker ' .. worker .. ' stopped renewing it, and no retries are left',
          worker, now_us)
      else
        Stats.count(queue, 'retries', now_us)
        meta.m = meta.m - 1
        meta.qt = Clock.ms(now_us)
        Place.to_waiting(jid, meta, now_us, true)
      end
      Job.save(jid, meta, data)
    else
      Place.drop_stray(key, jid)
    end
  end
  return #jids
end

end -- of sweep.lua's own locals
