-- stats.lua: what is known of a queue beyond its jobs: statistics per UTC day,
-- totals, the indexes of its complete and failed jobs, and its counts.
--
-- Statistics (K.stats(queue, day), expires stats_days after the last call that
-- made a field of it, as a rule its first: Stats.flush): how long jobs
-- waited (popped - eligible) and ran (completed - popped), in seconds: count,
-- mean and M2 (fields wait:n, wait:mean, wait:m2; Welford: variance is
-- M2 / (n - 1)), and a histogram, one field per bucket (wait:hist:ms250 ...),
-- named by its lower bound:
--   ms0 .. ms9      1 ms wide, below 10 ms        (10 buckets)
--   ms10 .. ms90    10 ms wide, below 100 ms      (9)
--   ms100 .. ms900  100 ms wide, below 1 s        (9)
--   s1 .. s59       1 s wide, below 1 min         (59)
--   m1 .. m59       1 min wide, below 1 h         (59)
--   h1 .. h23       1 h wide, below 1 day         (23)
--   d1 .. d365      1 day wide (d365: a year or more)
-- Only buckets that were hit exist: jobs of 1-500 ms fill at most 24 fields per
-- histogram. A queue-day holds 3 moments x 2 + its buckets + 3 counts fields:
-- about 15 to 70 in practice, 2 x 535 + 9 at most. (Days written before the
-- ms buckets have one s0 field for everything below a second.) Also counts:
-- failures (attempts that failed), failed (final), retries.
--
-- Totals per queue, in K.queue(queue), kept for good (retention does not touch
-- them): total:completed (completions reported, including those that moved the
-- job on to another queue), total:failed (jobs failed for good), total:retried.
--
-- Throughput, all queues together, in K.throughput(hour) (one hash per UTC hour,
-- hours since the epoch): fields c:<minute> and f:<minute> (minute of the hour,
-- 0-59) count the jobs completed (as total:completed does) and failed for good
-- in that minute. A call pays one HINCRBY per field it has something for,
-- whatever the number of jobs (a call that both completes and fails is rare).
-- The first write of a field also sets the hour's EXPIRE to throughput_hours + 1
-- hours: at most two EXPIREs a minute, and nothing to trim.
--
-- Observations are gathered for the length of a script call and written once per
-- (queue, day) with Chan's merge of the batch into the stored moments (and once
-- more for the waits of the jobs handed to idle masters at the call's end:
-- handoff.lua). Every job that starts counts one wait, popped or handed.
--
-- The indexes K.complete_index(queue) and K.failed_index(queue) (jid -> time,
-- ms) list a queue's complete and failed jobs; the scripts that move a job into
-- or out of those states call Stats.enter and Stats.leave. Entries are written
-- once per index and call (a ZADD per job was a tenth of a completion's cost).

local Stats = {}
-- "queue\0day" -> {queue, day, times = {what -> {n, mean, m2}}, hist, counts}, gathered
-- by call number pending_call (CALL), not yet written
local pending, pending_call = {}, 0
local call_us -- the time of the call's observations (a call has one)

-- The bucket of a time: its unit and lower bound (the name is unit .. bound).
local function bucket(seconds)
  if seconds < 1 then
    local ms = math.floor(seconds * 1000 + 1e-6) -- a time of 7 ms stays in ms7
    if ms < 10 then
      return 'ms', ms
    elseif ms < 100 then
      return 'ms', ms - ms % 10
    end
    return 'ms', math.min(900, ms - ms % 100)
  elseif seconds < 60 then
    return 's', math.floor(seconds)
  elseif seconds < 3600 then
    return 'm', math.floor(seconds / 60)
  elseif seconds < 86400 then
    return 'h', math.floor(seconds / 3600)
  end
  return 'd', math.min(365, math.floor(seconds / 86400))
end

-- Field names, made once per server (what -> unit -> bound -> "what:hist:<unit><bound>"):
-- building one costs more than the rest of an observation.
local hist_fields = {}

local function hist_field(what, seconds)
  local unit, bound = bucket(seconds)
  local by_unit = hist_fields[what]
  if not by_unit then
    by_unit = {}
    hist_fields[what] = by_unit
  end
  local names = by_unit[unit]
  if not names then
    names = {}
    by_unit[unit] = names
  end
  local field = names[bound]
  if not field then
    field = what .. ':hist:' .. unit .. int(bound)
    names[bound] = field
  end
  return field
end

-- The moments' field names of `what` (n, mean, m2).
local moment_fields = {}

local function moments_of(what)
  local fields = moment_fields[what]
  if not fields then
    fields = { what .. ':n', what .. ':mean', what .. ':m2' }
    moment_fields[what] = fields
  end
  return fields
end

-- The entry of (queue, day) this call gathers in: looked up by queue while
-- the time is the call's (a call has one), so no id is made for each job.
local last_us, by_queue = nil, {}
per_call(function()
  last_us, by_queue = nil, {}
end)

local function entry(queue, now_us)
  if pending_call ~= CALL then
    pending, pending_call = {}, CALL
  end
  call_us = now_us
  if now_us == last_us then
    local known = by_queue[queue]
    if known and pending[known.id] == known then
      return known
    end
  else
    last_us, by_queue = now_us, {}
  end
  local day = math.floor(now_us / 86400000000)
  local id = queue .. '\0' .. int(day)
  local e = pending[id]
  if not e then
    e = { id = id, queue = queue, day = day, times = {}, hist = {}, counts = {} }
    pending[id] = e
    pending[#pending + 1] = id
  end
  by_queue[queue] = e
  return e
end

-- Records one wait or run time (seconds).
function Stats.time(queue, what, seconds, now_us)
  if seconds < 0 then
    seconds = 0
  end
  local e = entry(queue, now_us)
  local t = e.times[what] or { n = 0, mean = 0, m2 = 0 }
  t.n = t.n + 1
  local delta = seconds - t.mean
  t.mean = t.mean + delta / t.n
  t.m2 = t.m2 + delta * (seconds - t.mean)
  e.times[what] = t
  local field = hist_field(what, seconds)
  e.hist[field] = (e.hist[field] or 0) + 1
end

-- Counts a failure, a final failure or a retry.
function Stats.count(queue, what, now_us)
  local e = entry(queue, now_us)
  e.counts[what] = (e.counts[what] or 0) + 1
end

local function num(x)
  return string.format('%.17g', x)
end

-- The totals kept for good, from what a day's entry gathered: field -> n.
local function totals_of(e)
  local run = e.times.run
  return { ['total:completed'] = run and run.n, ['total:failed'] = e.counts.failed,
    ['total:retried'] = e.counts.retries }
end

-- Counts `completed` and `failed` jobs in the minute of `now_us` (one HINCRBY
-- for each that is not 0).
local function count_minute(completed, failed, now_us)
  if completed + failed == 0 then
    return
  end
  local minute = math.floor(now_us / 60000000)
  local key = K.throughput(int(math.floor(minute / 60)))
  local of_hour = int(minute % 60)
  for _, counted in ipairs({ { 'c:', completed }, { 'f:', failed } }) do
    local n = counted[2]
    if n > 0 and redis.call('HINCRBY', key, counted[1] .. of_hour, int(n)) == n then
      redis.call('EXPIRE', key, int((LIMITS.throughput_hours + 1) * 3600))
    end
  end
end

-- Writes what this call gathered. Every script that records calls this last.
-- The day's EXPIRE is set by a call that made a field of it (so by the call
-- that made the key: stats_days from then), not by every call: an EXPIRE costs
-- as much as an HINCRBY (a write, an AOF entry).
function Stats.flush()
  if pending_call ~= CALL then -- nothing gathered since the last flush
    return
  end
  local completed, failed = 0, 0
  for _, id in ipairs(pending) do
    local e = pending[id]
    local key = K.stats(e.queue, e.day)
    local new = false
    for what, b in pairs(e.times) do
      local f = moments_of(what)
      local v = redis.call('HMGET', key, f[1], f[2], f[3])
      new = new or not v[1]
      local n, mean, m2 = tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0
      local total = n + b.n
      local delta = b.mean - mean
      local merged_mean = mean + delta * b.n / total
      local merged_m2 = m2 + b.m2 + delta * delta * n * b.n / total
      redis.call('HSET', key, f[1], int(total), f[2], num(merged_mean), f[3], num(merged_m2))
    end
    for _, counted in ipairs({ e.hist, e.counts }) do
      for field, n in pairs(counted) do
        if redis.call('HINCRBY', key, field, int(n)) == n then
          new = true
        end
      end
    end
    if new then
      redis.call('EXPIRE', key, int(LIMITS.stats_days * 86400))
    end
    local totals = totals_of(e)
    for field, n in pairs(totals) do
      redis.call('HINCRBY', K.queue(e.queue), field, int(n))
    end
    completed = completed + (totals['total:completed'] or 0)
    failed = failed + (totals['total:failed'] or 0)
  end
  count_minute(completed, failed, call_us)
  pending_call = 0 -- written
end

-- The index of a queue that lists jobs in `state` (complete, failed), or nil.
local function index_of(state, queue)
  if state == COMPLETE then
    return K.complete_index(queue)
  elseif state == FAILED then
    return K.failed_index(queue)
  end
  return nil
end

-- Entries for the indexes, gathered for the length of a call and written with one
-- ZADD per index when the call's operation is done (at_end): index -> {jid -> ms},
-- gathered by call number entering_call (CALL).
local entering, entering_call = {}, 0
at_end(function()
  if entering_call ~= CALL then
    return
  end
  for index, jids in pairs(entering) do
    local args = {}
    for jid, ms in pairs(jids) do
      args[#args + 1] = ms
      args[#args + 1] = jid
    end
    if #args > 0 then
      redis.call('ZADD', index, unpack(args))
    end
  end
  entering_call = 0
end)

-- The job just became complete or failed (meta.s and meta.q say where): it is
-- listed in its queue's index of that state. Any other state: nothing.
function Stats.enter(jid, meta, now_us)
  local index = index_of(meta.s, meta.q)
  if index then
    if entering_call ~= CALL then
      entering, entering_call = {}, CALL
    end
    local jids = entering[index]
    if not jids then
      jids = {}
      entering[index] = jids
    end
    jids[jid] = int(Clock.ms(now_us))
  end
end

-- A complete or failed job leaves that state (meta.s and meta.q as they were).
function Stats.leave(jid, meta)
  local index = index_of(meta.s, meta.q)
  if index then
    if entering_call == CALL and entering[index] then
      entering[index][jid] = nil
    end
    redis.call('ZREM', index, jid)
  end
end

-- When a job became eligible (ms), from its record's meta alone; nil if it has none.
local function eligible_ms(jid)
  local meta = Job.glance(jid)
  if not meta then
    return nil
  end
  local first = type(meta.h) == 'table' and type(meta.h[1]) == 'table' and meta.h[1].t
  local at = meta.qt or first
  return type(at) == 'number' and at or nil
end

-- How long (ms) the oldest waiting job of the queue has waited since it became
-- eligible; 0 when none waits. Order tickets follow eligible time, so it is the
-- head of the ready lane with the lowest ticket of any priority (the first 32
-- priorities are looked at, two lanes each: a lane a pop just emptied stays
-- ready until the next pop; a stale lane score may hide an older head).
local function oldest_waiting_ms(queue, now_ms)
  local lanes = {}
  for _, prio in ipairs(redis.call('ZRANGE', K.prios(queue), 0, 31)) do
    local top = redis.call('ZRANGE', K.ready(queue, prio), 0, 1, 'WITHSCORES')
    for i = 1, #top, 2 do
      lanes[#lanes + 1] = { tonumber(top[i + 1]), K.lane(queue, prio, top[i]) }
    end
  end
  table.sort(lanes, function(a, b)
    return a[1] < b[1]
  end)
  for _, lane in ipairs(lanes) do
    local jid = redis.call('LINDEX', lane[2], 0)
    if jid then
      local at = eligible_ms(jid)
      return at and math.max(0, now_ms - at) or 0
    end
  end
  return 0
end

-- The counts of one queue, as JSON (counts.lua says what each field means).
function Stats.counts(queue, now_us)
  local c = redis.call('HMGET', K.queue(queue), 'queued', 'throttled', 'paused',
    'total:completed', 'total:failed', 'total:retried')
  local queued, throttled = tonumber(c[1]) or 0, tonumber(c[2]) or 0
  local running = redis.call('ZCARD', K.running(queue))
  local stalled = running > 0 and redis.call('ZCOUNT', K.running(queue), '-inf', '(' .. int(now_us))
    or 0
  local waiting = queued - throttled
  return Json.object({
    { WAITING, int(waiting) },
    { THROTTLED, int(throttled) },
    { SCHEDULED, int(redis.call('ZCARD', K.scheduled(queue))) },
    { RUNNING, int(running - stalled) },
    { STALLED, int(stalled) },
    { DEPENDS, int(redis.call('SCARD', K.depends(queue))) },
    { COMPLETE, int(redis.call('ZCARD', K.complete_index(queue))) },
    { FAILED, int(redis.call('ZCARD', K.failed_index(queue))) },
    { 'paused', c[3] == '1' and 'true' or 'false' },
    { 'size_warning', cjson.encode(Config.get('size-warning', queue)) },
    { 'completed_total', int(tonumber(c[4]) or 0) },
    { 'failed_total', int(tonumber(c[5]) or 0) },
    { 'retried_total', int(tonumber(c[6]) or 0) },
    { 'oldest_waiting_ms', int(waiting > 0 and oldest_waiting_ms(queue, Clock.ms(now_us)) or 0) },
  })
end
