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
-- of each of its queues with it, so that job's first lease is short
-- (handoff_lease_ms, 1 s; a live master renews it as soon as it has it), and
-- the call that hands a job to one registration, when other masters still
-- wait on the queue, leaves the queue's wake-up token saying when that lease
-- runs out ('at:<us>', Redis time; Handoff.token). The list is BLPOPped only
-- by masters that are alive and waiting: the one that gets the token pops at
-- that time, which reclaims the job if it was not renewed and takes it. So a
-- job handed to a dead master starts about 1 s late, once per queue per dead
-- registration, and a registration is trusted only idle_fresh_ms (a waiting
-- master renews it at least every IDLE_WAIT_S, master.py). A live master
-- pays for this with one pop per handed job, and only while another master
-- waits on the same queue (one that comes back short learns the lease's end
-- from its own pop: wake_in_ms counts running leases).

local Handoff = {}

-- The master stops waiting on these queues (its pop is under way).
function Handoff.withdraw(worker, queues)
  for _, queue in ipairs(queues) do
    redis.call('ZREM', K.idle(queue), worker)
  end
end

-- The master waits for jobs of these queues from now on.
function Handoff.register(worker, queues, now_ms)
  for _, queue in ipairs(queues) do
    redis.call('ZADD', K.idle(queue), now_ms, worker)
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
  local first_lease_s -- read once a registration is found (a drain meets none)
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
    local worker, since = got[1], tonumber(got[2])
    if now_ms - since <= LIMITS.idle_fresh_ms then
      first_lease_s = first_lease_s
        or math.min(LIMITS.handoff_lease_ms / 1000, Config.get('heartbeat', queue))
      local reply
      local taken = Lanes.pop(queue, 1, now_us, function(jid, meta, data, start_us)
        reply = Lease.hand(jid, meta, data, worker, worker .. now_us, now_us, start_us,
          first_lease_s)
      end, 0)
      if taken == 0 then -- ready lanes over their domains' limits: nothing to give
        redis.call('ZADD', idle, since, worker)
        left = false
        break
      end
      redis.call('RPUSH', K.worker_wake(worker), reply)
      handed, is_ready = true, nil
    end
  end
  if left == nil then
    left = ready(queue)
  end
  if handed and redis.call('ZCARD', idle) > 0 then
    Handoff.token(queue, now_us + first_lease_s * 1000000)
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
