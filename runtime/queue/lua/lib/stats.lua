-- stats.lua: per queue and UTC day, how long jobs waited (popped - eligible) and
-- ran (completed - popped), in seconds: count, mean and M2 (fields wait:n,
-- wait:mean, wait:m2; Welford: variance is M2 / (n - 1)), and a histogram (fields
-- wait:hist:s5, wait:hist:m3 ...) with 1 s buckets for the first minute, 1 min
-- for the first hour, 1 h for the first day, 1 day after (capped at 365). Also
-- counts: failures (attempts that failed), failed (final), retries.
--
-- Observations are gathered for the length of a script call and written once per
-- (queue, day) with Chan's merge of the batch into the stored moments.

local Stats = {}
local pending = {} -- "queue\0day" -> {queue, day, times = {what -> {n, mean, m2}}, hist, counts}
per_call(function()
  pending = {}
end)

local function bucket(seconds)
  if seconds < 60 then
    return 's' .. math.floor(seconds)
  elseif seconds < 3600 then
    return 'm' .. math.floor(seconds / 60)
  elseif seconds < 86400 then
    return 'h' .. math.floor(seconds / 3600)
  end
  return 'd' .. math.min(365, math.floor(seconds / 86400))
end

local function entry(queue, now_us)
  local day = math.floor(now_us / 86400000000)
  local id = queue .. '\0' .. day
  local e = pending[id]
  if not e then
    e = { queue = queue, day = day, times = {}, hist = {}, counts = {} }
    pending[id] = e
    pending[#pending + 1] = id
  end
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
  local field = what .. ':hist:' .. bucket(seconds)
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

-- Writes what this call gathered. Every script that records calls this last.
function Stats.flush()
  for _, id in ipairs(pending) do
    local e = pending[id]
    local key = K.stats(e.queue, e.day)
    for what, b in pairs(e.times) do
      local v = redis.call('HMGET', key, what .. ':n', what .. ':mean', what .. ':m2')
      local n, mean, m2 = tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0
      local total = n + b.n
      local delta = b.mean - mean
      local merged_mean = mean + delta * b.n / total
      local merged_m2 = m2 + b.m2 + delta * delta * n * b.n / total
      redis.call('HSET', key, what .. ':n', total, what .. ':mean', num(merged_mean),
        what .. ':m2', num(merged_m2))
    end
    for field, n in pairs(e.hist) do
      redis.call('HINCRBY', key, field, n)
    end
    for field, n in pairs(e.counts) do
      redis.call('HINCRBY', key, field, n)
    end
    redis.call('EXPIRE', key, LIMITS.stats_days * 86400)
  end
  pending = {}
end
