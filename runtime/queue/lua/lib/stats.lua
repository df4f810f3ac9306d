-- stats.lua: what is known of a queue beyond its jobs: statistics per UTC day,
-- totals, the indexes of its complete and failed jobs, and its counts.
--
-- Statistics (K.stats(queue, day), expires stats_days after the last call that
-- made a field of it, as a rule its first: Stats.flush): how long jobs
-- waited (popped - eligible) and ran (completed - popped), in whole ms: the sum
-- of the times (fields wait:ms, run:ms) and of their squares (wait:ms2,
-- run:ms2: an integer, a float past 2^63), and a histogram, one field per
-- bucket (wait:hist:ms250 ...), which also gives the count (its total); mean
-- and variance follow from the three (runtime/queue/stats.py). Every field is
-- only ever added to (HINCRBY, HINCRBYFLOAT): a flush reads nothing, and adds
-- no sum of 0. Buckets are named by their lower bound:
--   ms0 .. ms9      1 ms wide, below 10 ms        (10 buckets)
--   ms10 .. ms90    10 ms wide, below 100 ms      (9)
--   ms100 .. ms900  100 ms wide, below 1 s        (9)
--   s1 .. s59       1 s wide, below 1 min         (59)
--   m1 .. m59       1 min wide, below 1 h         (59)
--   h1 .. h23       1 h wide, below 1 day         (23)
--   d1 .. d365      1 day wide (d365: a year or more)
-- Usage per klass goes in the same hash (Stats.usage, below).
-- Only buckets that were hit exist: jobs of 1-500 ms fill at most 24 fields per
-- histogram. A queue-day holds 2 sums x 2 + its buckets + 4 counts fields:
-- about 15 to 70 in practice, 2 x 535 + 8 at most. Also counts: failures
-- (attempts that failed), failed (final), retries, cancelled (jobs cancelled
-- before they ended that left a tombstone: Place.cancel).
-- Days written by earlier versions hold the moments as count, mean and M2
-- (wait:n, wait:mean, wait:m2, in seconds, merged read-modify-write: Welford)
-- instead of the sums, and may have one s0 bucket for everything below a
-- second. During an upgrade one day may hold both; the histogram counts the
-- jobs of both, the reader merges the two parts (stats.py).
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
-- (queue, day), one HINCRBY or HINCRBYFLOAT per field (and once
-- more for the waits of the jobs handed to idle masters at the call's end:
-- handoff.lua). Every job that starts counts one wait, popped or handed.
--
-- The indexes K.complete_index(queue) and K.failed_index(queue) (jid -> time,
-- ms) list a queue's complete and failed jobs; the scripts that move a job into
-- or out of those states call Stats.enter and Stats.leave. K.cancelled_index
-- lists its tombstones: Place.cancel writes it, Stats.leave takes them out. Entries are written
-- once per index and call (a ZADD per job was a tenth of a completion's cost).

local Stats = {}
do -- this file's own locals end with it: a library's main chunk holds at most 200
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

-- The sums' field names of `what` (sum of ms, sum of ms squared).
local sum_fields = {}

local function sums_of(what)
  local fields = sum_fields[what]
  if not fields then
    fields = { what .. ':ms', what .. ':ms2' }
    sum_fields[what] = fields
  end
  return fields
end

-- What a call gathers, per (queue, day), not yet written: entries
-- {queue, day, call, times = {what -> {n, ms, ms2}}, hist = {field -> n},
-- counts = {what -> n}, key, key_day}, the live ones (call = CALL) listed in
-- live[1 .. live_n] by call number live_call. A library (FCALL) keeps them
-- from call to call, emptied once written, so a call in steady state makes
-- no table and no string here: what a script allocates costs it again in the
-- collector's work. At most ENTRIES_MAX queues are kept (then all are dropped),
-- for one namespace (entries_ns) at a time.
local ENTRIES_MAX = 256
local entries, entries_n, entries_ns = {}, 0, nil
local live, live_n, live_call = {}, 0, 0

local function entry(queue, now_us)
  if live_call ~= CALL then
    live_n, live_call = 0, CALL
  end
  call_us = now_us
  local day = math.floor(now_us / 86400000000)
  if entries_ns ~= NS then
    entries, entries_n, entries_ns = {}, 0, NS
  end
  local e = entries[queue]
  if e and e.call == CALL then
    if e.day == day then
      return e
    end
    e = nil -- this call gathers for another day too (its time is one: not seen)
  end
  if not e then
    if entries_n >= ENTRIES_MAX then
      entries, entries_n = {}, 0
    end
    e = { queue = queue, times = {}, hist = {}, counts = {} }
    entries[queue], entries_n = e, entries_n + 1
  end
  -- what an earlier call gathered and never wrote (it failed) is dropped
  for _, t in pairs(e.times) do
    t.n, t.ms, t.ms2 = 0, 0, 0
  end
  for field in pairs(e.hist) do
    e.hist[field] = nil
  end
  for what in pairs(e.counts) do
    e.counts[what] = 0
  end
  e.call, e.day = CALL, day
  live_n = live_n + 1
  live[live_n] = e
  return e
end

-- Records one wait or run time (seconds; kept in whole ms, as jobs' times are).
function Stats.time(queue, what, seconds, now_us)
  if seconds < 0 then
    seconds = 0
  end
  local ms = math.floor(seconds * 1000 + 0.5)
  local e = entry(queue, now_us)
  local t = e.times[what]
  if t then
    t.n, t.ms, t.ms2 = t.n + 1, t.ms + ms, t.ms2 + ms * ms
  else -- a table per queue and `what`, kept
    e.times[what] = { n = 1, ms = ms, ms2 = ms * ms }
  end
  local field = hist_field(what, seconds)
  e.hist[field] = (e.hist[field] or 0) + 1
end

-- Usage per klass (an attempt's CPU seconds and peak RSS, lib/attempt.lua), in the
-- same hash: a histogram each, one field per bucket named by its upper bound
-- (USAGE_BOUNDS; "inf" above the last), klass last since a klass holds ":":
-- u:cpu:<bound>:<klass>, u:rss:<bound>:<klass>; and the sums u:cpu:ms:<klass>
-- (whole ms) and u:rss:mb:<klass> (whole MB). runtime/metrics.py reads them as
-- runtime_job_cpu_seconds and runtime_job_max_rss_bytes by queue and klass.
local USAGE_BOUNDS = {
  cpu = { 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60, 600, 3600 }, -- seconds
  rss = { 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384 }, -- MB
}
-- Field names made once per server: klass -> what -> {bucket index -> field,
-- sum = field}; emptied past USAGE_NAMES_MAX klasses.
local USAGE_NAMES_MAX = 1000
local usage_names, usage_names_n = {}, 0

local function usage_field(klass, what, value)
  local of_klass = usage_names[klass]
  if not of_klass then
    if usage_names_n >= USAGE_NAMES_MAX then
      usage_names, usage_names_n = {}, 0
    end
    of_klass = { cpu = {}, rss = {} }
    usage_names[klass], usage_names_n = of_klass, usage_names_n + 1
  end
  local bounds, names = USAGE_BOUNDS[what], of_klass[what]
  local i = #bounds + 1
  for b = 1, #bounds do
    if value <= bounds[b] then
      i = b
      break
    end
  end
  local field = names[i]
  if not field then
    local bound = bounds[i] and tostring(bounds[i]) or 'inf'
    field = 'u:' .. what .. ':' .. bound .. ':' .. klass
    names[i] = field
  end
  return field, of_klass
end

-- Records one attempt's usage: `cpu_s` seconds, `rss_mb` MB, by queue and klass.
function Stats.usage(queue, klass, cpu_s, rss_mb, now_us)
  local e = entry(queue, now_us)
  local hist = e.hist
  local cpu_field, of_klass = usage_field(klass, 'cpu', cpu_s)
  local rss_field = usage_field(klass, 'rss', rss_mb)
  hist[cpu_field] = (hist[cpu_field] or 0) + 1
  hist[rss_field] = (hist[rss_field] or 0) + 1
  local sums = of_klass.sums
  if not sums then
    sums = { 'u:cpu:ms:' .. klass, 'u:rss:mb:' .. klass }
    of_klass.sums = sums
  end
  local cpu_ms, mb = math.floor(cpu_s * 1000 + 0.5), math.floor(rss_mb + 0.5)
  if cpu_ms > 0 then
    hist[sums[1]] = (hist[sums[1]] or 0) + cpu_ms
  end
  if mb > 0 then
    hist[sums[2]] = (hist[sums[2]] or 0) + mb
  end
end

-- Counts a failure, a final failure or a retry.
function Stats.count(queue, what, now_us)
  local e = entry(queue, now_us)
  e.counts[what] = (e.counts[what] or 0) + 1
end

-- Adds a sum of squares (ms squared) to its field: by HINCRBY (cheaper by a
-- third) while the field and the sum are integers of 64 bits, else (a day of
-- waits of months) by HINCRBYFLOAT: an HINCRBY that would overflow, or finds
-- the float an HINCRBYFLOAT left, fails and writes nothing.
local function add_squares(key, field, x)
  if x < 9007199254740992 and type(redis.pcall('HINCRBY', key, field, int(x))) == 'number' then
    return
  end
  redis.call('HINCRBYFLOAT', key, field,
    x < 9007199254740992 and int(x) or string.format('%.17g', x))
end

-- The throughput hash of an hour: hour -> key, the last one made.
local hour_key, hour_of_key, hour_ns = nil, nil, nil

-- Counts `completed` and `failed` jobs in the minute of `now_us` (one HINCRBY
-- for each that is not 0).
local function count_minute(completed, failed, now_us)
  if completed + failed == 0 then
    return
  end
  local minute = math.floor(now_us / 60000000)
  local hour = math.floor(minute / 60)
  if hour ~= hour_of_key or hour_ns ~= NS then
    hour_key, hour_of_key, hour_ns = K.throughput(int(hour)), hour, NS
  end
  local of_hour = int(minute % 60)
  local expire = int((LIMITS.throughput_hours + 1) * 3600)
  if completed > 0
      and redis.call('HINCRBY', hour_key, 'c:' .. of_hour, int(completed)) == completed then
    redis.call('EXPIRE', hour_key, expire)
  end
  if failed > 0 and redis.call('HINCRBY', hour_key, 'f:' .. of_hour, int(failed)) == failed then
    redis.call('EXPIRE', hour_key, expire)
  end
end

-- Adds n to a field of the queue's totals (K.queue), if n is not 0.
local function add_total(e, field, n)
  if n > 0 then
    if not e.queue_key then
      e.queue_key = K.queue(e.queue)
    end
    redis.call('HINCRBY', e.queue_key, field, int(n))
  end
end

-- Writes what this call gathered. Every script that records calls this last.
-- The day's EXPIRE is set by a call that made a bucket or count field of it (so
-- by the call that made the key, which makes one: stats_days from then), not by
-- every call: an EXPIRE costs as much as an HINCRBY (a write, an AOF entry).
function Stats.flush()
  if live_call ~= CALL then -- nothing gathered since the last flush
    return
  end
  local completed, failed = 0, 0
  for i = 1, live_n do
    local e = live[i]
    if e.key_day ~= e.day then
      e.key, e.key_day = K.stats(e.queue, e.day), e.day
    end
    local key = e.key
    local new = false
    local run_n = 0
    for what, t in pairs(e.times) do
      if t.ms > 0 then -- sums of 0 ms add nothing; the buckets count the jobs
        local f = sums_of(what)
        redis.call('HINCRBY', key, f[1], int(t.ms))
        add_squares(key, f[2], t.ms2)
      end
      if what == 'run' then
        run_n = t.n
      end
      t.n, t.ms, t.ms2 = 0, 0, 0
    end
    for field, n in pairs(e.hist) do
      if redis.call('HINCRBY', key, field, int(n)) == n then
        new = true
      end
      e.hist[field] = nil
    end
    local counts = e.counts
    for what, n in pairs(counts) do
      if n > 0 and redis.call('HINCRBY', key, what, int(n)) == n then
        new = true
      end
    end
    if new then
      redis.call('EXPIRE', key, int(LIMITS.stats_days * 86400))
    end
    add_total(e, 'total:completed', run_n)
    add_total(e, 'total:failed', counts.failed or 0)
    add_total(e, 'total:retried', counts.retries or 0)
    completed = completed + run_n
    failed = failed + (counts.failed or 0)
    for what in pairs(counts) do
      counts[what] = 0
    end
    e.call = 0 -- written
  end
  count_minute(completed, failed, call_us)
  live_n, live_call = 0, 0 -- written
end

-- The index of a queue that lists jobs in `state` (complete, failed,
-- cancelled: tombstones, listed by Place.cancel), or nil.
local function index_of(state, queue)
  if state == COMPLETE then
    return K.complete_index(queue)
  elseif state == FAILED then
    return K.failed_index(queue)
  elseif state == CANCELLED then
    return K.cancelled_index(queue)
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
    local jid = redis.call('LINDEX', lane[2], '0')
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
    { CANCELLED, int(redis.call('ZCARD', K.cancelled_index(queue))) },
    { 'paused', c[3] == '1' and 'true' or 'false' },
    { 'size_warning', cjson.encode(Config.get('size-warning', queue)) },
    { 'completed_total', int(tonumber(c[4]) or 0) },
    { 'failed_total', int(tonumber(c[5]) or 0) },
    { 'retried_total', int(tonumber(c[6]) or 0) },
    { 'oldest_waiting_ms', int(waiting > 0 and oldest_waiting_ms(queue, Clock.ms(now_us)) or 0) },
  })
end
end -- of stats.lua's own locals
