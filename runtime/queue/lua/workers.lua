-- workers.lua: the masters that popped or renewed recently, and what they hold.
--
-- KEYS[1]  the namespace root
-- ARGV     (none)
-- Reply    {"<worker>": {"seen_ms": n, "jobs": [jid, ...], "host": text|null,
--          "pid": n|null, "queues": [queue, ...], "concurrency": n|null,
--          "started_ms": n|null, "records": n|null, "told": bool, "running": [{"jid", "klass",
--          "queue", "started_ms", "elapsed_ms"}, ...]}, ...}, at most
--          workers_max, most recently seen first.
--          told: the master sent its info (worker_info.lua). When it did not,
--          host and pid come from a default "host-pid" worker id (null for
--          another id), queues are those of the jobs it holds, concurrency is
--          null. records: the record forms its release reads (null: a release
--          before compact records). running: the jobs it holds, oldest first; started_ms is when
--          it popped the job, elapsed_ms how long ago that was (Redis time).
-- Read-only (no-writes): runs while Redis is full, and on replicas.
-- Errors   none

local now_ms = Clock.ms(Clock.now_us())

local function running_of(worker)
  local rows, queues, seen = {}, {}, {}
  for _, jid in ipairs(redis.call('SMEMBERS', K.worker_jobs(worker))) do
    local meta = Job.read(jid)
    local started = meta and meta.pt
    rows[#rows + 1] = { jid = jid, klass = meta and meta.k or nil,
      queue = meta and meta.q or nil, started_ms = started,
      elapsed_ms = started and math.max(0, now_ms - started) or nil }
    if meta and not seen[meta.q] then
      seen[meta.q] = true
      queues[#queues + 1] = meta.q
    end
  end
  table.sort(rows, function(a, b)
    local x, y = a.started_ms or 0, b.started_ms or 0
    return x < y or (x == y and a.jid < b.jid)
  end)
  table.sort(queues)
  return rows, queues
end

local function entry(worker, seen_ms)
  local rows, held_queues = running_of(worker)
  local jids, running = {}, {}
  for i, row in ipairs(rows) do
    jids[i] = row.jid
    running[i] = cjson.encode(row)
  end
  local raw = redis.call('GET', K.worker_info(worker))
  local ok, info = Json.lenient(raw or '')
  local told = ok and type(info) == 'table'
  if not told then
    local host, pid = string.match(worker, '^(.+)-(%d+)$')
    info = { host = host, pid = tonumber(pid), queues = held_queues }
  end
  return Json.object({
    { 'seen_ms', int(seen_ms) },
    { 'jobs', Json.array(jids) },
    { 'host', info.host and cjson.encode(info.host) or 'null' },
    { 'pid', info.pid and int(info.pid) or 'null' },
    { 'queues', Json.array(info.queues or {}) },
    { 'concurrency', info.concurrency and int(info.concurrency) or 'null' },
    { 'started_ms', info.started_ms and int(info.started_ms) or 'null' },
    { 'records', type(info.records) == 'number' and int(info.records) or 'null' },
    { 'told', told and 'true' or 'false' },
    { 'running', '[' .. table.concat(running, ',') .. ']' },
  })
end

local rows = redis.call('ZREVRANGE', K.workers, 0, LIMITS.workers_max - 1, 'WITHSCORES')
local parts = {}
for i = 1, #rows, 2 do
  parts[#parts + 1] = cjson.encode(rows[i]) .. ':' .. entry(rows[i], tonumber(rows[i + 1]))
end
return '{' .. table.concat(parts, ',') .. '}'
