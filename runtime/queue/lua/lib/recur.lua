-- recur.lua: recurring jobs, spawned by the pops of their queue.
--
-- A recurrence is a JSON definition in hash K.recur (id -> definition):
--   id, q queue, spec (the job template: klass, priority, retries, tags ...),
--   data (the data text), every (seconds) or cron (text; its ticks precomputed by
--   clients with croniter into zset K.recur_ticks(id), ms), tz, policy
--   (skip | once | all), grace (s), next (ms, the next tick), last (ms, the
--   newest tick spawned), ticks_to (ms, cron: the newest tick stored), count.
-- K.recurring(queue) scores each recurrence of the queue by its next tick (us).
--
-- Each due tick becomes one job with jid "<id>-<tick ms>", inside the pop's
-- atomic script: however many masters pop, a tick is spawned once. Ticks that
-- came due while nobody popped follow the policy: all (a job each, at most
-- recur_catch_up per call), once (one job for the newest), skip (only ticks at
-- most `grace` seconds late).
--
-- A definition that does not decode is left in K.recur for a person to read
-- (unrecur removes it) and dropped from its queue's schedule by the pop that
-- meets it; one whose jobs no longer pass put's checks (its data over a
-- lowered max-data-bytes, say) stops, with the reason in its `error`.

local Recur = {}

local function sound(def)
  return type(def) == 'table' and type(def.id) == 'string' and type(def.q) == 'string'
    and type(def.spec) == 'table' and type(def.data) == 'string'
    and type(def.policy) == 'string' and type(def.grace) == 'number'
    and (def.next == nil or type(def.next) == 'number')
    and (type(def.every) == 'number' or (type(def.cron) == 'string'
      and type(def.ticks_to) == 'number'))
end

-- The definition of recurrence `id`: def; nil when there is none; false and
-- the raw text when it does not decode.
function Recur.load(id)
  local raw = redis.call('HGET', K.recur, id)
  if not raw then
    return nil
  end
  local ok, def = Json.strict(raw)
  if not ok or not sound(def) then
    return false, raw
  end
  return def
end

function Recur.save(def)
  redis.call('HSET', K.recur, def.id, cjson.encode(def))
  if def.next then
    Due.lower(def.q, def.next * 1000)
    redis.call('ZADD', K.recurring(def.q), int(def.next * 1000), def.id)
  else
    redis.call('ZREM', K.recurring(def.q), def.id)
  end
end

-- The ticks of `def` due by now_ms (oldest first); moves def.next past them.
local function due_ticks(def, now_ms)
  local ticks = {}
  if def.every then
    local step = math.max(1, math.floor(def.every * 1000))
    local t = def.next
    while t and t <= now_ms and #ticks < LIMITS.recur_catch_up do
      ticks[#ticks + 1] = t
      t = t + step
    end
    if t and t <= now_ms and def.policy ~= 'all' then
      t = t + step * math.ceil((now_ms - t + 1) / step) -- skip the rest of a long gap
    end
    def.next = t
  else
    local key = K.recur_ticks(def.id)
    for _, t in ipairs(redis.call('ZRANGEBYSCORE', key, '-inf', int(now_ms), 'LIMIT', 0,
      LIMITS.recur_catch_up)) do
      ticks[#ticks + 1] = tonumber(t)
    end
    if #ticks > 0 then
      redis.call('ZREMRANGEBYSCORE', key, '-inf', int(ticks[#ticks]))
    end
    -- out of ticks: come back after the newest known one, asking for more each time
    def.next = tonumber(redis.call('ZRANGE', key, '0', '0')[1]) or (def.ticks_to + 1)
  end
  return ticks
end

-- Spawns the job of one tick; false and why when its template no longer makes a job.
local function spawn_one(def, tick, now_us)
  local spec = {}
  for k, v in pairs(def.spec) do
    spec[k] = v
  end
  spec.jid, spec.queue = def.id .. '-' .. int(tick), def.q
  if redis.call('HEXISTS', K.jobs, spec.jid) == 1 then
    return true
  end
  local ok, job, why = E.attempt(Create.parse, spec, def.data, Clock.ms(now_us))
  if not ok then
    return false, why
  end
  Create.job(job, now_us)
  def.count = (def.count or 0) + 1
  return true
end

-- Spawns the due jobs of the queue's recurrences; returns the cron recurrences
-- running low on precomputed ticks ({id, cron, tz, after}) for the caller to extend.
function Recur.spawn(queue, now_us)
  local now_ms = Clock.ms(now_us)
  local low = {}
  local ids = redis.call('ZRANGEBYSCORE', K.recurring(queue), '-inf', int(now_us), 'LIMIT', 0,
    LIMITS.recur_batch)
  for _, id in ipairs(ids) do
    local def = Recur.load(id)
    if not def or def.q ~= queue then -- gone, corrupt, or moved to another queue
      redis.call('ZREM', K.recurring(queue), id)
    else
      local ticks = due_ticks(def, now_ms)
      for i, tick in ipairs(ticks) do
        local newest = i == #ticks
        if def.policy == 'all' or (newest and def.policy == 'once')
            or (def.policy == 'skip' and now_ms - tick <= def.grace * 1000) then
          local ok, why = spawn_one(def, tick, now_us)
          if not ok then
            def.next, def.error = nil, why -- stopped: Recur.save drops it from the schedule
            break
          end
        end
      end
      if #ticks > 0 then
        def.last = ticks[#ticks]
      end
      Recur.save(def)
      if def.cron and redis.call('ZCARD', K.recur_ticks(id)) < LIMITS.recur_low then
        low[#low + 1] = { id = id, cron = def.cron, tz = def.tz, after = def.ticks_to }
      end
    end
  end
  return low
end
