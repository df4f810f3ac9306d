-- lanes.lua: the waiting jobs of a queue, in pop order, with rate-limited domains.
--
-- Waiting jobs sit in lanes: one list per (priority, domain), oldest first
-- (domain '' is "no domain"). Every job entering a lane gets the queue's next
-- order ticket (K.queue field seq); since due scheduled jobs are promoted before
-- anything else enters, tickets follow eligible time, then insertion order.
--
-- A non-empty lane is either ready, in K.ready(queue, prio) (the priorities
-- that have ready lanes are in K.prios), or throttled, in K.throttled(queue)
-- scored by when its domain frees (us). A ready lane's score is a lower bound
-- of its head's ticket: a pop does not re-score the lane it took from, and when
-- the head it finds is younger than the next lane's score, it corrects the
-- score and chooses again. A pop takes the lowest priority, then the ready lane
-- with the oldest head, so it costs O(log lanes) whatever the number of
-- domains, and a throttled domain never holds back another domain's jobs.
--
-- A domain's lanes move together: K.domain_lanes(domain) lists the non-empty
-- lanes of the domain in every queue and priority. The start that spends a
-- domain's budget moves all of them (at most release_batch) to throttled at
-- once, whichever queue spent it, so the ready lanes are those whose domain may
-- start a job. Only a change of the default limit (or a domain with more lanes
-- than that) leaves a spent domain's lane ready: a pop that meets one throttles
-- its domain on the way, at most pop_skips of them per call, and then reports
-- that it stopped short (Lanes.pop's second result).
--
-- Counters in K.queue(queue): queued (jobs in lanes), throttled (in throttled lanes).
-- A push at the tail reads seq and queued and writes both with one HSET: a
-- write costs a script more than a read (its propagation to the AOF and
-- replicas), and a put is mostly writes.
--
-- A domain at its concurrency cap, or paused (domains.lua), may start nothing
-- whatever the time: its lanes are throttled until Due.HELD, a score no
-- release reaches, and wait there at no cost to any pop; the end of a lease
-- that frees a slot readies them (Lanes.rescore_domain), as a resume does.
--
-- Fair queues (the queue's setting fair = 1): a ready lane's score is its
-- place in a rotation instead of a bound of its head's ticket. A pop takes one
-- job from the lane with the lowest score, then gives the lane a new ticket
-- (the queue's seq): it goes after every lane ready now, and a lane that
-- becomes ready comes in with its head's ticket, after the lanes served
-- before its job was put. So a domain's backlog delays another domain's
-- first job by at most one job per other ready domain. (Lanes.peek still
-- lists a fair queue by age.)
--
-- A job past its deadline (meta.x, expires_in) met at a lane's head fails as
-- runtime.Expired (Job.expire, place.lua) instead of being taken, counted
-- against the call's drop budget.
--
-- A call that put a job into a ready lane of a queue, and took none out of a
-- lane nor throttled one, knows the queue has a ready job when it ends
-- (Lanes.surely_ready): the hand-off at its end reads no counters to learn it.
--
-- A lane entry whose record is corrupt, gone or not waiting in this queue is
-- dropped by the pop that meets it at the head (a corrupt record is failed:
-- Job.corrupt); until then its ticket reads as 0, so its lane comes first.

local Lanes = {}
do -- this file's own locals end with it: a library's main chunk holds at most 200

-- The queues this call (number readied_call) put a job into a ready lane of;
-- shrunk_call: the last call that took a job out of a lane or throttled one.
local readied, readied_call, shrunk_call = {}, 0, 0

local function readied_now(queue)
  if readied_call ~= CALL then
    readied, readied_call = {}, CALL
  end
  readied[queue] = true
end

local function shrunk()
  shrunk_call = CALL
end

-- The queues whose K.prios this call (number prios_call) saw holding a member
-- (read or ZADDed) with no ZREM of it since: the set surely exists, no EXISTS
-- needed (a ZREM forgets the mark, whether or not the set is left empty).
local prios_held, prios_call = {}, 0

local function held(queue)
  if prios_call ~= CALL then
    prios_held, prios_call = emptied(prios_held), CALL
  end
  prios_held[queue] = true
end

local function unheld(queue)
  if prios_call == CALL then
    prios_held[queue] = nil
  end
end

-- Whether the queue has a priority with ready lanes (K.prios exists); read only
-- when this call has not seen it for itself.
function Lanes.has_prios(queue)
  if prios_call == CALL and prios_held[queue] then
    return true
  end
  return redis.call('EXISTS', K.prios(queue)) == 1
end

-- Whether the queue surely has a ready job now: this call put one into a ready
-- lane and nothing since (or before) in it took a job out or throttled a lane.
function Lanes.surely_ready(queue)
  return readied_call == CALL and readied[queue] == true and shrunk_call ~= CALL
end

local function lane_id(prio, domain)
  return prio .. '|' .. domain
end

-- Splits "<prio>|<rest>" (lane ids and domain index entries): prio, rest.
local function split_id(id)
  local bar = string.find(id, '|', 1, true)
  return string.sub(id, 1, bar - 1), string.sub(id, bar + 1)
end

-- The order ticket of a lane entry; 0 for an entry a pop will drop.
local function ticket_of(jid)
  return Job.ticket(jid) or 0
end

local function head_ticket(lane)
  local jid = redis.call('LINDEX', lane, '0')
  if not jid then
    return nil
  end
  return ticket_of(jid)
end

local function make_ready(queue, prio, domain, ticket)
  redis.call('ZADD', K.ready(queue, prio), ticket, domain)
  redis.call('ZADD', K.prios(queue), prio, prio)
  held(queue)
end

local function unready(queue, prio, domain)
  shrunk()
  local ready = K.ready(queue, prio)
  if redis.call('ZREM', ready, domain) == 1 and redis.call('ZCARD', ready) == 0 then
    redis.call('ZREM', K.prios(queue), prio)
    unheld(queue)
  end
end

local function throttle(queue, prio, domain, free_at_us, jobs)
  shrunk()
  Due.lower(queue, math.ceil(free_at_us))
  redis.call('ZADD', K.throttled(queue), int(math.ceil(free_at_us)), lane_id(prio, domain))
  redis.call('HINCRBY', K.queue(queue), 'throttled', jobs)
end

-- The lane left the throttled set: its jobs count as waiting again.
local function unthrottle(queue, prio, domain, jobs)
  redis.call('ZREM', K.throttled(queue), lane_id(prio, domain))
  redis.call('HINCRBY', K.queue(queue), 'throttled', -jobs)
end

-- The domain index follows the lanes: a lane enters when it gets its first job
-- and leaves when its last job goes.
local function enter(queue, prio, domain)
  if domain ~= '' then
    redis.call('ZADD', K.domain_lanes(domain), 0, prio .. '|' .. queue)
  end
end

local function leave(queue, prio, domain)
  if domain ~= '' then
    redis.call('ZREM', K.domain_lanes(domain), prio .. '|' .. queue)
  end
end

-- The lane of (queue, prio, domain) is empty: out of every index.
local function drop_empty(queue, prio, domain)
  shrunk()
  unready(queue, prio, domain)
  redis.call('ZREM', K.throttled(queue), lane_id(prio, domain))
  leave(queue, prio, domain)
end

-- Calls visit(queue, prio, lane, jobs, throttled_score) for each non-empty
-- lane of the domain (at most release_batch); empty ones are dropped.
local function each_lane_of(domain, visit)
  local index = K.domain_lanes(domain)
  for _, entry in ipairs(redis.call('ZRANGE', index, '0', int(LIMITS.release_batch - 1))) do
    local prio, queue = split_id(entry)
    local lane = K.lane(queue, prio, domain)
    local jobs = redis.call('LLEN', lane)
    if jobs == 0 then
      drop_empty(queue, prio, domain)
    else
      visit(queue, prio, lane, jobs,
        tonumber(redis.call('ZSCORE', K.throttled(queue), lane_id(prio, domain))))
    end
  end
end

-- The domain's budget is spent until free_at_us: its lanes in every queue
-- and priority become (or stay) throttled until then.
function Lanes.throttle_domain(domain, free_at_us)
  shrunk()
  each_lane_of(domain, function(queue, prio, _, jobs, score)
    if score then
      Due.lower(queue, math.ceil(free_at_us))
      redis.call('ZADD', K.throttled(queue), int(math.ceil(free_at_us)), lane_id(prio, domain))
    else
      unready(queue, prio, domain)
      throttle(queue, prio, domain, free_at_us, jobs)
    end
  end)
end

-- The domain's limit changed: each of its lanes is throttled until the domain
-- frees under the new limit, or ready now. Returns the queues where a lane
-- became ready or frees earlier than before (their idle masters should look).
function Lanes.rescore_domain(domain, now_us)
  shrunk()
  local free_at = Domains.free_at(domain, now_us)
  local sooner, seen = {}, {}
  each_lane_of(domain, function(queue, prio, lane, jobs, score)
    if free_at and score then
      Due.lower(queue, math.ceil(free_at))
      redis.call('ZADD', K.throttled(queue), int(math.ceil(free_at)), lane_id(prio, domain))
    elseif free_at then
      unready(queue, prio, domain)
      throttle(queue, prio, domain, free_at, jobs)
    elseif score then
      unthrottle(queue, prio, domain, jobs)
      make_ready(queue, prio, domain, head_ticket(lane))
    end
    if score and (not free_at or free_at < score) and not seen[queue] then
      seen[queue] = true
      sooner[#sooner + 1] = queue
    end
  end)
  return sooner
end

-- Adds a job to its lane: at the tail with a new ticket, or back at the head
-- with the ticket it had (a job whose lease expired goes before younger jobs).
-- Returns whether the lane was empty.
function Lanes.push(queue, jid, meta, now_us, at_head)
  local prio, domain = meta.p or 0, meta.dm or ''
  local lane = K.lane(queue, prio, domain)
  local counters = K.queue(queue)
  local n
  if at_head then
    -- a job leased ahead by the previous release holds no ticket (place.lua)
    meta.o = meta.o or redis.call('HINCRBY', K.queue(queue), 'seq', '1')
    n = redis.call('LPUSH', lane, jid)
    redis.call('HINCRBY', counters, 'queued', '1')
  else
    local c = redis.call('HMGET', counters, 'seq', 'queued')
    meta.o = (tonumber(c[1]) or 0) + 1
    n = redis.call('RPUSH', lane, jid)
    redis.call('HSET', counters, 'seq', string.format('%d', meta.o),
      'queued', string.format('%d', (tonumber(c[2]) or 0) + 1))
  end
  if n == 1 then
    enter(queue, prio, domain)
    local free_at = Domains.free_at(domain, now_us)
    if free_at then
      throttle(queue, prio, domain, free_at, 1)
    else
      make_ready(queue, prio, domain, meta.o)
      readied_now(queue)
    end
  elseif domain ~= '' and redis.call('ZSCORE', K.throttled(queue), lane_id(prio, domain)) then
    redis.call('HINCRBY', K.queue(queue), 'throttled', 1)
  else
    if at_head then
      redis.call('ZADD', K.ready(queue, prio), meta.o, domain)
    end
    readied_now(queue)
  end
  return n == 1
end

-- Takes a job out of its lane (cancel, priority change). False if it was not there.
function Lanes.remove(queue, jid, meta)
  shrunk()
  local prio, domain = meta.p or 0, meta.dm or ''
  local lane = K.lane(queue, prio, domain)
  local was_head = redis.call('LINDEX', lane, '0') == jid
  if redis.call('LREM', lane, '1', jid) == 0 then
    return false
  end
  redis.call('HINCRBY', K.queue(queue), 'queued', -1)
  local throttled = redis.call('ZSCORE', K.throttled(queue), lane_id(prio, domain))
  if throttled then
    redis.call('HINCRBY', K.queue(queue), 'throttled', -1)
  end
  local ticket = head_ticket(lane)
  if ticket == nil then
    drop_empty(queue, prio, domain)
  elseif was_head and not throttled then
    redis.call('ZADD', K.ready(queue, prio), ticket, domain)
  end
  return true
end

-- Puts a job into its lane at the place its ticket says (priority change).
function Lanes.insert_by_ticket(queue, jid, meta, now_us)
  local prio, domain = meta.p or 0, meta.dm or ''
  local lane = K.lane(queue, prio, domain)
  local lo, hi = 0, redis.call('LLEN', lane) -- find the first job with a later ticket
  local n = hi
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if ticket_of(redis.call('LINDEX', lane, mid)) < meta.o then
      lo = mid + 1
    else
      hi = mid
    end
  end
  if lo == 0 then
    Lanes.push(queue, jid, meta, now_us, true) -- a new head: push keeps the books
    return
  elseif lo == n then
    redis.call('RPUSH', lane, jid)
  else
    redis.call('LINSERT', lane, 'BEFORE', redis.call('LINDEX', lane, lo), jid)
  end
  redis.call('HINCRBY', K.queue(queue), 'queued', 1)
  if redis.call('ZSCORE', K.throttled(queue), lane_id(prio, domain)) then
    redis.call('HINCRBY', K.queue(queue), 'throttled', 1)
  end
end

-- Lanes whose domain has freed become ready again (at most `count` of them).
-- (A lane released while its domain is spent after all, which only a change
-- of the default limit leaves behind, is throttled again by the pop that meets it.)
function Lanes.release(queue, now_us, count, ahead_us)
  local key = K.throttled(queue)
  local horizon = int(now_us + (ahead_us or 0))
  local ids = redis.call('ZRANGEBYSCORE', key, '-inf', horizon, 'LIMIT', '0', int(count))
  if #ids == 0 then
    return
  end
  redis.call('ZREM', key, unpack(ids))
  local freed, prios = 0, {}
  for _, id in ipairs(ids) do
    local prio, domain = split_id(id)
    local lane = K.lane(queue, prio, domain)
    local ticket = head_ticket(lane)
    if ticket then
      freed = freed + redis.call('LLEN', lane)
      redis.call('ZADD', K.ready(queue, prio), ticket, domain)
      prios[prio] = true
    else
      leave(queue, prio, domain)
    end
  end
  redis.call('HINCRBY', K.queue(queue), 'throttled', int(-freed))
  for prio in pairs(prios) do
    redis.call('ZADD', K.prios(queue), prio, prio)
    held(queue)
  end
end

-- Whether the lane's head must go because its record is corrupt, gone or not
-- waiting in this queue (a corrupt one is failed; the caller takes the entry
-- off the lane). Counts against the call's drop budget (Job.may_drop); `spent`
-- is true once that is used up.
local function drop_head(queue, jid, meta, problem, raw, sound_meta)
  if meta and meta.s == WAITING and meta.q == queue then
    return false, false
  end
  if not Job.may_drop() then
    return false, true
  end
  if meta == false then
    Job.corrupt(jid, problem, raw, sound_meta, queue)
  end
  return true, false
end

-- Takes up to `room` jobs in pop order; calls take(jid, meta, data, start_us)
-- for each (start_us: a domain's turn within ahead_us that the job waits for).
-- The start that spends a domain's budget throttles the domain's lanes; a
-- ready lane found over its limit is throttled on the way (a skip). Returns
-- the jobs taken and whether it stopped short (after pop_skips skips, or the
-- call's drop budget spent) with lanes still ready (the caller should ask
-- again at once).
-- A lane's heads are read with one LRANGE and the entries done with (taken or
-- dropped, always a prefix of the lane) taken off with one LPOP, before anything
-- reads the lane's length and when the walk leaves the lane.
function Lanes.pop(queue, room, now_us, take, ahead_us)
  shrunk()
  local taken, skips, dropped, spent = 0, 0, 0, false
  local fair = Config.get('fair', queue) == 1
  while taken < room and skips < LIMITS.pop_skips and not spent do
    local before = taken
    local prio = redis.call('ZRANGE', K.prios(queue), '0', '0')[1]
    if not prio then
      break
    end
    held(queue)
    local ready = K.ready(queue, prio)
    local best = redis.call('ZRANGE', ready, '0', '1', 'WITHSCORES')
    if #best == 0 then
      redis.call('ZREM', K.prios(queue), prio) -- repair: a priority without lanes
      unheld(queue)
    else
      local domain, bound = best[1], tonumber(best[4])
      local lane = K.lane(queue, prio, domain)
      local heads, at, done = {}, 0, 0 -- the heads read, the one looked at, entries done with
      local function take_off()
        if done > 0 then
          redis.call('LPOP', lane, int(done))
          done = 0
        end
      end
      while taken < room do
        at = at + 1
        if at > #heads then
          take_off()
          heads, at = redis.call('LRANGE', lane, '0', int(room - taken - 1)), 1
        end
        local jid = heads[at]
        if not jid then
          drop_empty(queue, prio, domain)
          break
        end
        local meta, data, raw, sound_meta = Job.read(jid, true) -- its data goes in a reply
        local drop
        drop, spent = drop_head(queue, jid, meta, data, raw, sound_meta)
        if not drop and not spent and meta.x and now_us > meta.x * 1000 then
          spent = not Job.may_drop() -- past its deadline: it fails, never starts
          drop = not spent
          if drop then
            Job.expire(jid, meta, data, now_us)
          end
        end
        if spent then
          break
        elseif drop then
          done = done + 1
          dropped = dropped + 1
        elseif bound and meta.o > bound and not fair then
          redis.call('ZADD', ready, meta.o, domain) -- the score was stale: choose again
          break
        else
          local granted, free_at, start_us = true, nil, nil
          if domain ~= '' then
            granted, free_at, start_us = Domains.acquire(domain, now_us, ahead_us)
          end
          if granted then
            done = done + 1
            taken = taken + 1
            take(jid, meta, data, start_us)
          end
          if free_at then -- spent by this start, or found spent: its lanes wait
            take_off()
            local left = redis.call('LLEN', lane)
            if left == 0 then
              drop_empty(queue, prio, domain)
            else
              unready(queue, prio, domain)
              throttle(queue, prio, domain, free_at, left)
            end
            Lanes.throttle_domain(domain, free_at)
            break
          end
          if fair and granted then -- its turn is over: the lane goes last
            take_off()
            if at < #heads or redis.call('LLEN', lane) > 0 then
              redis.call('ZADD', ready, redis.call('HINCRBY', K.queue(queue), 'seq', 1), domain)
            else
              drop_empty(queue, prio, domain)
            end
            break
          end
        end
      end
      take_off()
    end
    if taken == before then
      skips = skips + 1
    end
  end
  if taken + dropped > 0 then
    redis.call('HINCRBY', K.queue(queue), 'queued', int(-(taken + dropped)))
  end
  local short = taken < room and (skips >= LIMITS.pop_skips or spent)
      and Lanes.has_prios(queue)
  return taken, short
end

-- Up to `count` waiting jobs in pop order, without taking them: {jid, ...},
-- and {jid = {prio, domain}} (their lanes). A merge over the ready lanes of
-- the lowest priorities, one record read per job. Entries a pop would drop
-- (ticket 0) come first: the caller sees what they are. `due` ({prio -> {jid,
-- ...}}): jobs a pop would promote first; each follows the lanes of its
-- priority (a promoted job gets a new ticket), with no entry in `from`.
function Lanes.peek(queue, count, due)
  local out, from = {}, {}
  local prios, seen = {}, {}
  for _, prio in ipairs(redis.call('ZRANGE', K.prios(queue), 0, count - 1)) do
    seen[tonumber(prio)] = true
    prios[#prios + 1] = tonumber(prio)
  end
  for prio in pairs(due) do
    if not seen[prio] then
      prios[#prios + 1] = prio
    end
  end
  table.sort(prios)
  for _, prio in ipairs(prios) do
    local cursors = {}
    for _, domain in ipairs(redis.call('ZRANGE', K.ready(queue, prio), 0, count - 1)) do
      local lane = K.lane(queue, prio, domain)
      local jid = redis.call('LINDEX', lane, '0')
      if jid then
        cursors[#cursors + 1] = { lane = lane, domain = domain, index = 0, jid = jid,
          ticket = ticket_of(jid) }
      end
    end
    while #out < count and #cursors > 0 do
      local best = 1
      for i = 2, #cursors do
        if cursors[i].ticket < cursors[best].ticket then
          best = i
        end
      end
      local c = cursors[best]
      out[#out + 1] = c.jid
      from[c.jid] = { prio, c.domain }
      c.index = c.index + 1
      c.jid = redis.call('LINDEX', c.lane, c.index)
      if c.jid then
        c.ticket = ticket_of(c.jid)
      else
        table.remove(cursors, best)
      end
    end
    for _, jid in ipairs(due[prio] or {}) do
      if #out >= count then
        break
      end
      out[#out + 1] = jid
    end
    if #out >= count then
      break
    end
  end
  return out, from
end
end -- of lanes.lua's own locals
