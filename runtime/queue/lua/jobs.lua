-- jobs.lua: a page of a queue's jobs in one state, and how many are in it.
--
-- KEYS[1]  the namespace root
-- ARGV     queue, state, start (0..), count (0..get_max), order ("oldest" | "newest")
--          state: waiting, throttled, scheduled, running, depends, complete, failed,
--          cancelled (tombstones)
-- Order, oldest first ("newest" is the reverse):
--          waiting    pop order: priority, then eligible order (order tickets)
--          throttled  lane by lane, the lane whose domain frees first first
--          scheduled  by due time;  running: by lease expiry (stalled ones first)
--          complete   by completion time;  failed: by failure time
--          cancelled  by cancel time
--          depends    none kept (either way): the set's own order, stable while it
--                     does not change
-- Reply    {"total": n, "jobs": [job, ...]}, job as get.lua gives it (with
--          "state"). total counts the entries of the state's index; entries
--          whose job is gone, does not decode or has left the state are left
--          out of the page (it comes back shorter). Reads only.
-- Cost     a page of waiting jobs where one priority has several lanes (jobs of
--          several domains) is a merge of at most lanes_looked lanes by ticket,
--          as deep as start + count, at most depth_max; so is a page of depends
--          jobs. Other pages cost O(count + log n).
-- Read-only (no-writes): runs while Redis is full, and on replicas.
-- Errors   BAD_ARG (also for a merged page deeper than depth_max)

local DEPTH_MAX = 10000 -- deepest merged page (start + count)
local LANES_LOOKED = 1000 -- lanes of one priority (or throttled lanes) a page looks at
local CHUNK = 64 -- lane entries read at once by a merge

local queue = Check.queue('queue', ARGV[1])
local state = ARGV[2]
local start = Check.int('start', ARGV[3], 0, 1e12)
local count = Check.int('count', ARGV[4], 0, LIMITS.get_max)
local order = ARGV[5]
if order ~= 'oldest' and order ~= 'newest' then
  E.bad('order must be "oldest" or "newest", got ' .. tostring(order))
end
local newest = order == 'newest'

local function reversed(list)
  local out = {}
  for i = #list, 1, -1 do
    out[#out + 1] = list[i]
  end
  return out
end

-- Entries `from`.. of a list, from its head (or its tail, newest), `n` of them.
local function slice(key, from, n)
  if n <= 0 then
    return {}
  elseif newest then
    return reversed(redis.call('LRANGE', key, -(from + n), -(from + 1)))
  end
  return redis.call('LRANGE', key, from, from + n - 1)
end

local function check_depth(depth)
  if depth > DEPTH_MAX then
    E.bad('this page would go ' .. depth .. ' jobs deep; jobs of several lanes are listed '
      .. 'at most ' .. DEPTH_MAX .. ' deep')
  end
end

-- A min-heap of lane cursors by key.
local function heap_push(heap, c)
  heap[#heap + 1] = c
  local i = #heap
  while i > 1 and heap[math.floor(i / 2)].key > heap[i].key do
    local p = math.floor(i / 2)
    heap[p], heap[i] = heap[i], heap[p]
    i = p
  end
end

local function heap_pop(heap)
  local top = heap[1]
  heap[1] = heap[#heap]
  heap[#heap] = nil
  local i = 1
  while true do
    local l, r, m = 2 * i, 2 * i + 1, i
    if heap[l] and heap[l].key < heap[m].key then
      m = l
    end
    if heap[r] and heap[r].key < heap[m].key then
      m = r
    end
    if m == i then
      return top
    end
    heap[m], heap[i] = heap[i], heap[m]
    i = m
  end
end

-- Loads a cursor's next chunk and sets its key; false when its lane is done.
local function advance(c)
  c.i = c.i + 1
  if c.i > #c.buf then
    c.buf, c.i = slice(c.lane, c.read, CHUNK), 1
    c.read = c.read + #c.buf
    if #c.buf == 0 then
      return false
    end
  end
  local ticket = Job.ticket(c.buf[c.i]) or 0 -- an entry a pop would drop comes first
  c.key = newest and -ticket or ticket
  return true
end

-- The jids of several lanes merged by order ticket: `skip` of them, then up to `want`.
local function merged(lanes, skip, want)
  check_depth(skip + want)
  local heap, out, seen = {}, {}, 0
  for _, lane in ipairs(lanes) do
    local c = { lane = lane, buf = {}, i = 0, read = 0 }
    if advance(c) then
      heap_push(heap, c)
    end
  end
  while #heap > 0 and #out < want do
    local c = heap_pop(heap)
    seen = seen + 1
    if seen > skip then
      out[#out + 1] = c.buf[c.i]
    end
    if advance(c) then
      heap_push(heap, c)
    end
  end
  return out
end

-- Lanes listed one after another (each in its own order): `skip`, then up to `want`.
local function in_turn(lanes, skip, want, out)
  for _, lane in ipairs(lanes) do
    if #out >= want then
      break
    end
    local n = redis.call('LLEN', lane)
    if skip >= n then
      skip = skip - n
    else
      for _, jid in ipairs(slice(lane, skip, want - #out)) do
        out[#out + 1] = jid
      end
      skip = 0
    end
  end
  return skip
end

local function waiting_jids()
  local prios = redis.call(newest and 'ZREVRANGE' or 'ZRANGE', K.prios(queue), 0, -1)
  local out, skip = {}, start
  for _, prio in ipairs(prios) do
    if #out >= count then
      break
    end
    local lanes = {}
    for i, domain in ipairs(redis.call('ZRANGE', K.ready(queue, prio), 0, LANES_LOOKED - 1)) do
      lanes[i] = K.lane(queue, prio, domain)
    end
    if #lanes == 1 then
      skip = in_turn(lanes, skip, count, out)
    else
      local n = 0
      for _, lane in ipairs(lanes) do
        n = n + redis.call('LLEN', lane)
      end
      if skip >= n then
        skip = skip - n
      else
        for _, jid in ipairs(merged(lanes, skip, count - #out)) do
          out[#out + 1] = jid
        end
        skip = 0
      end
    end
  end
  return out
end

local function throttled_jids()
  local ids = redis.call(newest and 'ZREVRANGE' or 'ZRANGE', K.throttled(queue), 0,
    LANES_LOOKED - 1)
  local lanes = {}
  for i, id in ipairs(ids) do
    local bar = string.find(id, '|', 1, true)
    lanes[i] = K.lane(queue, string.sub(id, 1, bar - 1), string.sub(id, bar + 1))
  end
  local out = {}
  in_turn(lanes, start, count, out)
  return out
end

-- Members of a sorted set by rank, in the page's order.
local function ranked(key)
  if count == 0 then
    return {}
  end
  return redis.call(newest and 'ZREVRANGE' or 'ZRANGE', key, start, start + count - 1)
end

-- A scheduled-set member is a hex digit (how many hex digits the ticket has),
-- the ticket, then the jid (lib/place.lua).
local function scheduled_jids()
  local out = {}
  for i, member in ipairs(ranked(K.scheduled(queue))) do
    local digits = tonumber(string.sub(member, 1, 1), 16) or 0
    out[i] = string.sub(member, digits + 2)
  end
  return out
end

local function depends_jids()
  check_depth(start + count)
  local all, seen, cursor = {}, {}, '0'
  repeat
    local got = redis.call('SSCAN', K.depends(queue), cursor, 'COUNT', 1000)
    cursor = got[1]
    for _, jid in ipairs(got[2]) do
      if not seen[jid] then
        seen[jid] = true
        all[#all + 1] = jid
      end
    end
  until cursor == '0' or #all >= start + count
  local out = {}
  for i = start + 1, math.min(#all, start + count) do
    out[#out + 1] = all[i]
  end
  return out
end

local queued = redis.call('HMGET', K.queue(queue), 'queued', 'throttled')
local throttled = tonumber(queued[2]) or 0
local LISTS = {
  waiting = { function() return (tonumber(queued[1]) or 0) - throttled end, waiting_jids },
  throttled = { function() return throttled end, throttled_jids },
  scheduled = { function() return redis.call('ZCARD', K.scheduled(queue)) end, scheduled_jids },
  running = { function() return redis.call('ZCARD', K.running(queue)) end,
    function() return ranked(K.running(queue)) end },
  depends = { function() return redis.call('SCARD', K.depends(queue)) end, depends_jids },
  complete = { function() return redis.call('ZCARD', K.complete_index(queue)) end,
    function() return ranked(K.complete_index(queue)) end },
  failed = { function() return redis.call('ZCARD', K.failed_index(queue)) end,
    function() return ranked(K.failed_index(queue)) end },
  cancelled = { function() return redis.call('ZCARD', K.cancelled_index(queue)) end,
    function() return ranked(K.cancelled_index(queue)) end },
}
local list = LISTS[state]
if not list then
  E.bad('state must be one of waiting, throttled, scheduled, running, depends, complete, '
    .. 'failed, cancelled; got ' .. Text.escape(tostring(state)))
end

local stored = state == THROTTLED and WAITING or state
local jobs = {}
for _, jid in ipairs(count > 0 and list[2]() or {}) do
  local meta, data = Job.read(jid, true)
  if meta and meta.s == stored and meta.q == queue then
    jobs[#jobs + 1] = Job.reply(jid, meta, data,
      { { 'state', cjson.encode(Job.visible_state(meta)) } })
  end
end
return '{"total":' .. int(math.max(0, list[1]())) .. ',"jobs":[' .. table.concat(jobs, ',') .. ']}'
