-- handoff.lua: jobs go straight to masters that wait for them.
--
-- A master whose pop came back short (it has room and its queues had nothing
-- for it) registers in each queue's K.idle set, then blocks on its own list
-- K.worker_wake(worker). When jobs become ready in a queue (Place.wake), the
-- end of that call leases the queue's next job to the longest-waiting fresh
-- registration and pushes it, as a pop would reply it, onto that master's
-- list: the master's blocking wait returns the job itself, with no pop round
-- trip. A registration takes one job; a master's next pop drops its
-- registrations and collects anything handed to it meanwhile. Jobs left over
-- leave the queue's wake-up token, as before.
--
-- A master that died while registered (SIGKILL, a lost host) takes one job
-- of each of its queues with it, so that job's first lease is short (1 s on a
-- fast link, see below; a live master renews it as soon as it has it), and
-- the call that hands a job to one registration, when other masters still
-- wait on the queue, leaves the queue's wake-up token saying when that lease
-- runs out ('at:<us>', Redis time; Handoff.token). The list is BLPOPped only
-- by masters that are alive and waiting: the one that gets the token pops at
-- that time, which reclaims the job if it was not renewed and takes it. So a
-- job handed to a dead master starts one first lease late, once per queue per
-- dead registration, and a registration is trusted only idle_fresh_ms (a
-- waiting master renews it at least every IDLE_WAIT_S, master.py). A live
-- master pays for this with one pop per handed job, and only while another
-- master waits on the same queue (one that comes back short learns the
-- lease's end from its own pop: wake_in_ms counts running leases).
--
-- The first lease fits the master's link. A master states its recent round
-- trip to Redis when it registers (pop.lua's idle argument): the job it is
-- handed must reach it, and its renewal come back, within the first lease. A
-- registration's first lease is handoff_round_trips of those round trips when
-- that is longer than handoff_lease_ms, at most handoff_lease_max_ms (and never
-- longer than the queue's heartbeat). It rides in the registration's score:
-- the score is the time it was made (whole ms, as always) plus, below the
-- millisecond, the first lease in LEASE_STEP_MS steps over STEPS_PER_MS (a
-- binary fraction: exact in a double while times fit in 2^46 ms). A
-- registration whose score has no fraction gets handoff_lease_ms: every
-- master on a fast link registers as it did before. So a master that died
-- while registered holds a job up for its own first lease: 1 s on a fast
-- link, up to handoff_lease_max_ms on a slow one.

local Handoff = { LEASE_STEP_MS = 100, STEPS_PER_MS = 128 }

-- The first lease (ms) of a job handed to a master that states `rtt_ms`, in
-- whole LEASE_STEP_MS steps (0: handoff_lease_ms, the lease of a fast link).
function Handoff.lease_steps(rtt_ms)
  local lease_ms = math.min(LIMITS.handoff_round_trips * rtt_ms, LIMITS.handoff_lease_max_ms)
  if lease_ms <= LIMITS.handoff_lease_ms then
    return 0
  end
  return math.ceil(lease_ms / Handoff.LEASE_STEP_MS)
end

-- A registration's score (text, exact): made at now_ms, with this first lease.
function Handoff.score(now_ms, steps)
  if steps == 0 then
    return int(now_ms)
  end
  -- 1 / STEPS_PER_MS = 0.0078125: seven decimals write any step count exactly
  return int(now_ms) .. '.' .. string.format('%07d', steps * 10000000 / Handoff.STEPS_PER_MS)
end

-- A registration's score back: when it was made (ms) and its first lease (ms).
function Handoff.parse(score)
  local value = tonumber(score)
  local since = math.floor(value)
  local steps = math.floor((value - since) * Handoff.STEPS_PER_MS + 0.5)
  if steps == 0 then
    return since, LIMITS.handoff_lease_ms
  end
  return since, math.min(steps * Handoff.LEASE_STEP_MS, LIMITS.handoff_lease_max_ms)
end

-- The master stops waiting on these queues (its pop is under way).
function Handoff.withdraw(worker, queues)
  for _, queue in ipairs(queues) do
    redis.call('ZREM', K.idle(queue), worker)
  end
end

-- The master waits for jobs of these queues from now on; its recent round trip
-- to Redis is about rtt_ms (see the top).
function Handoff.register(worker, queues, now_ms, rtt_ms)
  local score = Handoff.score(now_ms, Handoff.lease_steps(rtt_ms))
  for _, queue in ipairs(queues) do
    redis.call('ZADD', K.idle(queue), score, worker)
  end
end

-- A handed job's reply as Lease.hand wrote it, which Python decodes (the list
-- is a plain Redis list: anything may have been pushed onto it by hand).
local function sound_reply(item)
  if string.sub(item, 1, 1) ~= '{' or not Text.utf8(item) then
    return false
  end
  local ok, reply = Json.strict(item, LIMITS.data_depth_max + 1) -- the data sits one level down
  return ok and type(reply) == 'table' and type(reply.jid) == 'string'
    and type(reply.meta) == 'table' and type(reply.meta.l) == 'string'
end

-- Jobs handed to the master and not yet taken off its list: their replies
-- (JSON; anything else on the list, wake-up tokens included, is dropped).
function Handoff.collect(worker)
  local key = K.worker_wake(worker)
  local items = redis.call('LRANGE', key, '0', '-1')
  if #items == 0 then
    return {}
  end
  redis.call('DEL', key)
  local jobs = {}
  for _, item in ipairs(items) do
    if sound_reply(item) then
      jobs[#jobs + 1] = item
    end
  end
  return jobs
end

-- Leaves the queue's wake-up token (at most one on the list): '1', look now,
-- or with at_us 'at:<at_us>', look then (a handed job's first lease ends).
-- Looking now wins over looking later, and an earlier time over a later one
-- (whoever looks learns the later times from its pop's wake_in_ms).
-- `read`: the caller read the list's first item already (`held`, nil if none).
function Handoff.token(queue, at_us, read, held)
  local key = K.wake(queue)
  if not read then
    held = redis.call('LINDEX', key, '0')
  end
  if not held then
    redis.call('RPUSH', key, at_us and ('at:' .. int(at_us)) or '1')
  elseif not at_us and held ~= '1' then
    redis.call('LSET', key, '0', '1')
  end
end

-- Whether the queue has jobs ready to run (waiting, not throttled), from its
-- counters queued and throttled (the lanes index is cleaned lazily, by pops).
local function counted_ready(queued, throttled)
  return (tonumber(queued) or 0) - (tonumber(throttled) or 0) > 0
end

local function ready(queue)
  local c = redis.call('HMGET', K.queue(queue), 'queued', 'throttled')
  return counted_ready(c[1], c[2])
end

-- Hands the queue's ready jobs to its idle masters, one each; true when ready
-- jobs are left over. When other masters still wait on the queue, the first
-- lease's end is left as the queue's wake-up token (see the top). `is_ready`:
-- whether it has ready jobs now (the caller read its counters; a stale
-- registration changes nothing, a handed job has them counted again).
local function offer(queue, now_us, is_ready)
  local idle = K.idle(queue)
  local now_ms = Clock.ms(now_us)
  local heartbeat_s -- read once a registration is found (a drain meets none)
  local first_end_us -- the earliest end of a first lease given
  local handed, left = false, nil
  for _ = 1, LIMITS.handoff_max do
    if is_ready == nil then -- a job was handed: count again
      is_ready = ready(queue)
    end
    if not is_ready then
      left = false
      break
    end
    local got = redis.call('ZPOPMIN', idle)
    if #got == 0 then
      left = true
      break
    end
    local worker, since, lease_ms = got[1], Handoff.parse(got[2])
    if now_ms - since <= LIMITS.idle_fresh_ms then
      heartbeat_s = heartbeat_s or Config.get('heartbeat', queue)
      local first_lease_s = math.min(lease_ms / 1000, heartbeat_s)
      local reply
      local taken = Lanes.pop(queue, 1, now_us, function(jid, meta, data, start_us)
        reply = Lease.hand(jid, meta, data, worker, worker .. now_us, now_us, start_us,
          first_lease_s)
      end, 0)
      if taken == 0 then -- ready lanes over their domains' limits: nothing to give
        redis.call('ZADD', idle, got[2], worker)
        left = false
        break
      end
      redis.call('RPUSH', K.worker_wake(worker), reply)
      handed, is_ready = true, nil
      local end_us = now_us + first_lease_s * 1000000
      first_end_us = math.min(first_end_us or end_us, end_us)
    end
  end
  if left == nil then
    left = ready(queue)
  end
  if handed and redis.call('ZCARD', idle) > 0 then
    Handoff.token(queue, first_end_us)
  end
  return left
end

-- At the end of every call: the queues Place.wake marked get their handoffs and,
-- if work is left (or Place.nudge asked), the queue's wake-up token. The waits
-- of the jobs handed (Lease.hand records them) are written once for the call,
-- as a pop writes its own: the operation's Stats.flush has run by now.
at_end(function()
  local woken = Place.woken()
  if next(woken) == nil then
    return
  end
  local now_us = Clock.now_us()
  for queue, why in pairs(woken) do
    local left, read, held = true, false, nil
    if redis.call('EXISTS', K.idle(queue)) == 0 then
      -- no master waits: nothing to hand, only the token to leave. A job of this
      -- call waits in a ready lane: it is left. A token that says look now
      -- already stays whatever the counters say; else they decide (a paused
      -- queue keeps its token).
      if not Lanes.surely_ready(queue) then
        read, held = true, redis.call('LINDEX', K.wake(queue), '0')
        if held ~= '1' then
          local c = redis.call('HMGET', K.queue(queue), 'queued', 'throttled', 'paused')
          if c[3] ~= '1' then
            left = counted_ready(c[1], c[2])
          end
        end
      end
    else
      local c = redis.call('HMGET', K.queue(queue), 'queued', 'throttled', 'paused')
      if c[3] ~= '1' then
        left = offer(queue, now_us, counted_ready(c[1], c[2]))
      end
    end
    if left or why == 'always' then
      Handoff.token(queue, nil, read, held)
    end
  end
  Stats.flush()
end)
