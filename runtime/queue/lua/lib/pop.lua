-- pop.lua: the work of a pop (pop.lua's header says what it does and replies),
-- shared by pop.lua and a master's exchange (exchange.lua, after its reports).
--
-- Pop.args(args, first): the pop's arguments args[first ..] (worker, count,
-- seed, order, ahead_us, idle, then the queues up to `last`), checked before any
-- write: {worker, count, seed, order, ahead_us, idle, rtt_ms, queues} (idle: a
-- boolean; rtt_ms: the round trip the idle argument states, 0 for none).
-- Pop.run(p, now_us, retention_batch): leases the jobs and returns the reply
-- (JSON text); deletes at most retention_batch completed jobs past retention,
-- and, when it scanned a queue, as many tombstones (Retention.sweep).
-- The caller flushes the statistics (Stats.flush) once its call is done.
--
-- Pop.run's steps, in order: Pop.scan (recurrences, reclaim, promotion, freed
-- lanes), Pop.take (leases in the pop's order, then jobs due soon), Pop.wake_at
-- (when to look again, a full pop's wake-up for other masters), Pop.reply.

local Pop = {}

function Pop.args(args, first, last)
  local p = {
    worker = Check.token('worker', args[first], LIMITS.worker_max),
    count = Check.int('count', args[first + 1], 0, LIMITS.pop_max),
    seed = Check.token('seed', args[first + 2], 64),
    order = args[first + 3],
  }
  if p.order ~= 'ordered' and p.order ~= 'round-robin' then
    E.bad('order must be "ordered" or "round-robin", got ' .. tostring(p.order))
  end
  p.ahead_us = Check.int('ahead_us', args[first + 4], 0, LIMITS.ahead_max_us)
  p.rtt_ms = Check.int('idle', args[first + 5], 0, LIMITS.idle_rtt_max_ms)
  p.idle = p.rtt_ms > 0
  p.queues = {}
  for i = first + 6, last do
    p.queues[#p.queues + 1] = Check.queue('queue', args[i])
  end
  return p
end

-- The queues not paused, in order (`active`); the cron recurrences low on ticks
-- (`refill`); and `scanned`: queue -> true for those not quiet (lib/due.lua),
-- whose sets were looked at: their recurrences, reclaim, promotion and freed
-- lanes done now.
function Pop.scan(queues, count, now_us, ahead_us)
  local active, refill = {}, {}
  local scanned = {}
  for _, queue in ipairs(queues) do
    if not Due.paused(queue) then
      if not Due.quiet(queue, now_us, now_us + ahead_us) then
        scanned[queue] = true
        for _, low in ipairs(Recur.spawn(queue, now_us)) do
          refill[#refill + 1] = low
        end
        Place.reclaim(queue, now_us, LIMITS.reclaim_batch)
        Place.promote(queue, now_us)
        -- enough freed lanes to fill this pop; a backlog goes with the next pops
        Lanes.release(queue, now_us, math.min(LIMITS.release_batch, LIMITS.pop_skips + 2 * count),
          ahead_us)
      end
      active[#active + 1] = queue
    end
  end
  return active, refill, scanned
end

-- Leases jobs of the active queues into `out` (through `take`) until it holds
-- p.count: in the queues' order or round-robin, then, with room left, scheduled
-- jobs due within p.ahead_us. True if a queue set aside pop_skips lanes and has
-- more (the pop stopped short: the caller looks again at once).
function Pop.take(p, active, scanned, out, take, now_us)
  local count, ahead_us = p.count, p.ahead_us
  local stopped_short = false
  if p.order == 'ordered' then
    for _, queue in ipairs(active) do
      if #out >= count or stopped_short then
        break
      end
      local _, short = Lanes.pop(queue, count - #out, now_us, take, ahead_us)
      stopped_short = short
    end
  else
    local live = active
    while #out < count and #live > 0 do
      local still = {}
      for _, queue in ipairs(live) do
        if #out < count then
          local taken, short = Lanes.pop(queue, 1, now_us, take, ahead_us)
          stopped_short = stopped_short or short
          if taken == 1 then
            still[#still + 1] = queue
          end
        end
      end
      live = still
    end
  end
  -- Room left: scheduled jobs whose due time comes within ahead_us, in queue order.
  if ahead_us > 0 and not stopped_short then
    for _, queue in ipairs(active) do
      if #out >= count then
        break
      end
      if scanned[queue] then
        Place.take_soon(queue, now_us, ahead_us, count - #out, take)
      end
    end
  end
  return stopped_short
end

-- When something next comes due in the queue (us): a scheduled job (whole
-- milliseconds), a throttled lane's domain, a lease expiry (for an expired
-- lease that post-outage grace holds: the end of its grace). It keeps the
-- earliest score of the four sets for the pops to come (lib/due.lua).
function Pop.next_due_us(queue, now_us)
  local due, earliest
  local keys = { K.scheduled(queue), K.throttled(queue), K.running(queue), K.recurring(queue) }
  for i, key in ipairs(keys) do
    local first = tonumber(redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')[2])
    if first and first >= Due.HELD then
      first = nil -- lanes held for a slot or a resume: no time frees them
    end
    if first and (not earliest or first < earliest) then
      earliest = first
    end
    if first and i == 1 then
      first = math.floor(first / 1000) * 1000
    elseif first and i == 3 and first <= now_us then
      first = Grace.until_us(queue, first, now_us) or first
    end
    if first and (not due or first < due) then
      due = first
    end
  end
  Due.store(queue, earliest, now_us)
  return due
end

-- A full pop (`taken` jobs of p.count) leaves a wake-up for another master when
-- work is left; a pop that came back short answers when this master should look
-- again (us; nil: nothing comes due).
function Pop.wake_at(p, active, scanned, taken, now_us)
  local count = p.count
  local wake_at
  for _, queue in ipairs(active) do
    if count > 0 and taken >= count then
      if Lanes.has_prios(queue) then
        Place.wake(queue)
      end
      if scanned[queue] then
        Pop.next_due_us(queue, now_us) -- a full pop that was not quiet keeps the time anew
      end
    else
      local due = Pop.next_due_us(queue, now_us)
      if due and (not wake_at or due < wake_at) then
        wake_at = due
      end
    end
  end
  return wake_at
end

-- The reply (JSON text), made in one piece (each string made is hashed whole: a
-- reply's jobs are its bulk).
function Pop.reply(out, now_us, wake_at, refill)
  local wake_in_ms = '-1'
  if wake_at then
    wake_in_ms = string.format('%.3f', math.max(0, wake_at - now_us) / 1000)
  end
  local reply = { '{"jobs":[' }
  for i, job in ipairs(out) do
    reply[2 * i], reply[2 * i + 1] = job, ','
  end
  reply[2 * #out + (#out > 0 and 1 or 2)] = '],"now_us":' .. int(now_us) .. ',"wake_in_ms":'
    .. wake_in_ms .. ',"refill":' .. Json.array(refill) .. '}'
  return table.concat(reply)
end

function Pop.run(p, now_us, retention_batch)
  local worker, count, seed = p.worker, p.count, p.seed
  local now_ms = Clock.ms(now_us)
  Lease.seen(worker, now_ms) -- at most once a second

  local active, refill, scanned = Pop.scan(p.queues, count, now_us, p.ahead_us)
  Retention.trim(now_us, retention_batch) -- old completed jobs go even when none complete
  if next(scanned) then
    Retention.sweep(now_us, retention_batch) -- and old tombstones, when nothing is cancelled
  end

  Handoff.withdraw(worker, p.queues)
  local out = Handoff.collect(worker)
  local function take(jid, meta, data, start_us)
    out[#out + 1] = Lease.hand(jid, meta, data, worker, seed, now_us, start_us)
  end
  Place.gather_holders() -- the worker's set written once for the jobs taken
  local stopped_short = Pop.take(p, active, scanned, out, take, now_us)
  Place.write_holders()

  -- every start may leave a TAT behind: forget passed ones at least as fast
  Domains.prune(now_us, LIMITS.prune_batch + 2 * #out)

  local wake_at = Pop.wake_at(p, active, scanned, #out, now_us)
  if p.idle and count > 0 and #out < count and not stopped_short then
    Handoff.register(worker, active, now_ms, p.rtt_ms)
  end
  if stopped_short then
    wake_at = now_us
  end
  return Pop.reply(out, now_us, wake_at, refill)
end
