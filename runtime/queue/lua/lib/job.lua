-- job.lua: the job record, its history, and its reply form.
--
-- A record is one field of the hash K.jobs: meta JSON, "\n", data JSON. Data is
-- the caller's JSON text, stored and returned byte for byte (decoded only to
-- check it).
-- Meta uses short names to keep a queued job small (and a queued job's may be
-- stored compact instead: lib/compact.lua) (runtime/queue/job.py maps
-- them to the public names):
--
--   k klass          q queue           s state           p priority (absent: 0)
--   g tags           r retries         m remaining       a attempts (pops so far)
--   o order ticket (waiting: lane ticket; scheduled: put ticket)
--   d due time (ms)   dm domain
--   uk unique key    uf unique_for (s)  rq run once more when done (requeue_if_running)
--   w worker (holder, or last holder)   l lease token
--   lr what the holder of lease l last did: complete | fail | retry | release
--   qt when it last became eligible (ms; absent: its put time)   pt when popped (ms)
--   f failure {g group, m message, t time, w worker}
--   bo backoff [min s, max s]          to timeout (s)    tr tracked (1)
--   h history: [{e event, t time (ms), w worker, q queue, g group, ...}]; h[1] is
--     the put, so its time is the put time (the history keeps its first event);
--     a corrupt record whose meta was lost starts at its failure instead.
--     Always the meta's last field (Job.save writes it so), its first event
--     with e and t first (Job.put_ms): the scripts keep it as text, split off
--     the meta before decoding, and append an event by concatenation
--     (Job.event), so a step never decodes or encodes the events before it.
--     Records of earlier versions (h anywhere) are read too and take this
--     layout at their next save. In the scripts' tables meta.h is that text
--     (the events joined by ",", without the brackets).
--   cr the stored record did not decode and was replaced by this failed one (1)
--   rl a complete job's result: the last rl bytes of the record, after its data
--   ot its last attempt's output is in K.output (1)    pg its progress is in K.progress (1)
--   tp the W3C traceparent of the span that put it (docs/operating.md, "Tracing")
--   u its last attempt's usage [cpu_s, max_rss_mb(, 0: the child's peak)] (lib/attempt.lua)
--   wt someone waits for it to end until then (ms)    wn how many registered (lib/wait.lua)
--   b its batch's bid (lib/batch.lua; a meta with it is never compact)
--   cn a tombstone's cancellation {t time (ms), b by what: cli, dashboard, api,
--     dependency}: a job cancelled before it ended (state cancelled) keeps k, q,
--     r, m, a, cn and a history of its put and its cancel, with data {} (Place.cancel)
--   h events may carry: n a note, c a count and j jids (puts), b the job that put it,
--     u the usage of the attempt that ended there (completed, retried, failed)
--   x its deadline to start (ms; expires_in after its due time; gone once it
--     started)   xi that expires_in (ms)
--   sl it holds a slot of its domain (running; lib/domains.lua)
--   af a debounced job put while the holder of its key ran waits for that
--     run to end (its jid)   db its debounce (ms) (lib/unique.lua)
--
-- Every read checks the record (Job.decode): one that does not decode, or that
-- Python could not decode in a reply, is corrupt. Job.load fails it at once,
-- as group runtime.CorruptJob (Place.corrupt), before the call writes anything
-- about it, so no script meets it again; loops that walk an index (a lane, the
-- running set ...) drop such entries, and entries whose job is gone or
-- elsewhere, from that index as they meet them.

local Job = {}
do -- this file's own locals end with it: a library's main chunk holds at most 200

-- The optional fields whose type the scripts rely on.
local TYPES = { p = 'number', g = 'table', a = 'number', o = 'number', d = 'number',
  dm = 'string', uk = 'string', uf = 'number', rq = 'number', w = 'string', l = 'string',
  lr = 'string', qt = 'number', pt = 'number', f = 'table', bo = 'table', to = 'number',
  tr = 'number', cr = 'number', rl = 'number', ot = 'number', pg = 'number', wt = 'number',
  wn = 'number', b = 'string', cn = 'table', x = 'number', xi = 'number', af = 'string',
  db = 'number', sl = 'number' }

local function strings(list)
  for i = 1, #list do
    if type(list[i]) ~= 'string' then
      return false
    end
  end
  return true
end

-- The parts of a meta that are more than a typed field; nil, or what is wrong.
local function structure_problem(meta)
  local f = meta.f
  if f and (type(f.g) ~= 'string' or type(f.m) ~= 'string' or type(f.t) ~= 'number') then
    return 'has a bad failure'
  end
  if (meta.g and not strings(meta.g))
      or (meta.bo and (type(meta.bo[1]) ~= 'number' or type(meta.bo[2]) ~= 'number')) then
    return 'has bad tags or backoff'
  end
  local s = meta.s
  if ((s == WAITING or s == SCHEDULED) and not meta.o)
      or (s == RUNNING and not (meta.w and meta.l)) or (s == FAILED and not f)
      or (s == CANCELLED and not (meta.cn and type(meta.cn.t) == 'number'
        and type(meta.cn.b) == 'string')) then
    return 'lacks what a ' .. s .. ' job needs'
  end
  return nil
end

-- What the scripts and the Python side need of a meta (its history aside:
-- decode_meta): nil, or what is wrong.
local function meta_problem(meta)
  if type(meta.k) ~= 'string' or type(meta.q) ~= 'string' or not STORED_STATES[meta.s]
      or type(meta.r) ~= 'number' or type(meta.m) ~= 'number' then
    return 'lacks a field (k, q, s, r, m or h) or has it of the wrong type'
  end
  for name, value in pairs(meta) do
    local want = TYPES[name]
    if want and type(value) ~= want then
      return 'has a bad ' .. name
    end
  end
  return structure_problem(meta)
end

-- The JSON of a job's first event (its put; a corrupt record's failure): e
-- and t first, then `fields` (Job.put_ms reads the put time there). Later
-- events are cjson's, fields in any order.
local function first_event_json(event, t_ms, fields)
  local rest = ''
  if fields then
    local e, t = fields.e, fields.t
    fields.e, fields.t = nil, nil
    rest = cjson.encode(fields)
    fields.e, fields.t = e, t
    rest = rest == '{}' and '' or (',' .. string.sub(rest, 2, -2))
  end
  return '{"e":' .. cjson.encode(event) .. ',"t":' .. int(t_ms) .. rest .. '}'
end

-- The meta's fields as JSON (cjson's text, without h), and that text
-- without its closing brace: the meta as stored is the latter, then
-- ',"h":[', its history (meta.h, text) and ']}' (Job.encode).
local function fields_of(meta)
  local h = meta.h
  meta.h = nil
  local fields = cjson.encode(meta) -- never {}: k, q, r and m are always there
  meta.h = h
  return string.sub(fields, 1, -2), fields
end

-- The meta as stored: cjson's text of its fields, then its history (meta.h,
-- text) last.
function Job.encode(meta)
  return fields_of(meta) .. ',"h":[' .. meta.h .. ']}'
end

-- The put time (ms): the time of the first event; 0 when a history written by
-- other means does not say (the next read for a reply fails such a record).
function Job.put_ms(meta)
  local t = tonumber(string.match(meta.h, '^{"e":"[^"]*","t":(%d+)'))
  if not t then
    local ok, events = Json.strict('[' .. meta.h .. ']')
    t = ok and type(events) == 'table' and type(events[1]) == 'table' and events[1].t
    t = type(t) == 'number' and t or 0
  end
  return t
end

-- A history, as stored, that a reply may carry: nil, or what is wrong. A read
-- for a reply checks it (Python decodes it); other reads only look at its
-- first event.
local function history_problem(h)
  if string.find(h, '^{"e":"put","t":%d+}$') then -- a job put and not yet moved
    return nil
  end
  local ok, events = Json.strict('[' .. h .. ']')
  if not ok or type(events) ~= 'table' then
    return 'meta has a bad history'
  end
  for i = 1, #events do
    local ev = events[i]
    if type(ev) ~= 'table' or type(ev.e) ~= 'string' or type(ev.t) ~= 'number' then
      return 'meta has a bad history event'
    end
  end
  return nil
end

-- The history of a meta written by an earlier version (h, a list of events
-- anywhere in the meta), checked and made text: nil, or what is wrong.
local function history_from_list(meta)
  local h = meta.h
  if type(h) ~= 'table' then
    return 'meta lacks a field (k, q, s, r, m or h) or has it of the wrong type'
  end
  local events = {}
  for i = 1, #h do
    local ev = h[i]
    if type(ev) ~= 'table' or type(ev.e) ~= 'string' or type(ev.t) ~= 'number' then
      return 'meta has a bad history event'
    end
    events[i] = i == 1 and first_event_json(ev.e, ev.t, ev) or cjson.encode(ev)
  end
  meta.h = table.concat(events, ',')
  return nil
end

-- The meta part of a record (the text before its first newline), decoded,
-- with meta.h the history's text: meta; or nil and what is wrong. A meta
-- whose last field is its history (Job.encode) is split there first, and
-- only the fields before it are decoded. In any JSON text a '"' inside a
-- string follows a backslash, so ',"h":[' is a field name, and '}],"' the
-- end of a list of objects followed by another field: a history that is not
-- last (no other field holds a list of objects).
local function decode_meta(line)
  if string.byte(line, 1) ~= 123 then -- not '{': the compact form
    return Compact.decode(line)
  end
  local at = string.find(line, ',"h":[', 1, true)
  if at and string.sub(line, -2) == ']}' and not string.find(line, '}],"', at, true) then
    local ok, meta = Json.strict(string.sub(line, 1, at - 1) .. '}')
    if ok and type(meta) == 'table' and meta.h == nil then
      meta.h = string.sub(line, at + 6, -3)
      return meta
    end
  end
  local ok, meta = Json.strict(line)
  if not ok or type(meta) ~= 'table' then
    return nil, 'meta not a JSON object'
  end
  local problem = history_from_list(meta)
  if problem then
    return nil, problem
  end
  return meta
end

-- Splits and checks a stored record: meta, data; or nil, nil, what is wrong,
-- and the meta when that part is sound. Every read checks what the scripts
-- use: the newline, the meta (strict JSON, the fields they need, a history
-- that is not empty). A read for a reply (`for_reply`) also checks
-- what Python decodes: the whole record is UTF-8, the history a list of
-- events and the data a strict JSON object, nested at most data_depth_max
-- levels. Only such reads look at the data, so a call that does not reply
-- with it does not pay for decoding it (a heartbeat of jobs with big data).
function Job.decode(raw, for_reply)
  local nl = string.find(raw, '\n', 1, true)
  if not nl then
    return nil, nil, 'no newline between meta and data'
  end
  local meta, problem = decode_meta(string.sub(raw, 1, nl - 1))
  if not meta then
    return nil, nil, problem
  end
  problem = meta_problem(meta)
  if problem then
    return nil, nil, 'meta ' .. problem
  end
  if meta.h == '' then
    return nil, nil, 'meta has no history'
  end
  local data = string.sub(raw, nl + 1)
  if meta.rl and (meta.rl < 1 or meta.rl % 1 ~= 0 or meta.rl > #data - 2) then
    return nil, nil, 'meta has a bad rl'
  end
  if for_reply then
    if not Text.utf8(raw) then
      return nil, nil, 'not valid UTF-8', meta
    end
    problem = history_problem(meta.h)
    if problem then
      meta.h = '' -- the failed record starts its history anew
      return nil, nil, problem, meta
    end
    local object, result = Job.split(meta, data)
    local _, data_problem = Json.checked(object, true) -- the whole record is UTF-8
    if data_problem then
      return nil, nil, 'data ' .. data_problem, meta
    end
    if result and not Json.strict(result) then
      return nil, nil, 'result not valid JSON', meta
    end
  end
  return meta, data
end

-- A record's data part and its result (the last meta.rl bytes; nil when none).
-- The scripts carry both together as `data`: only a reply tells them apart.
function Job.split(meta, data)
  local rl = meta.rl
  if not rl then
    return data, nil
  end
  return string.sub(data, 1, #data - rl), string.sub(data, #data - rl + 1)
end

-- Records the scripts of this server wrote lately, by jid: {raw record, its
-- meta's fields as JSON (without h), h, data, whether a reply may carry it,
-- the meta itself when the saver was done with it}. A read that finds the
-- very record it remembers (Lua strings are interned, so comparing them
-- compares pointers) decodes only the fields and checks nothing: what the
-- scripts save was checked when read or made. A remembered meta (a pop's,
-- read next by the completion) is not even decoded: the read takes it, and
-- the entry goes (its reader changes the meta). A job that ended is not
-- remembered: it is read again late if ever, and would push out the records
-- pops read next. Any other bytes (written by hand, by an earlier version,
-- or by a server that remembers nothing since a restart or a reload of the
-- library) are read and checked in full (Job.decode). Two generations of at
-- most recent_records_bytes (counted twice: the record and its parts; a meta
-- taken counts no more, so a drain's own saves push out no backlog); a
-- script run by EVALSHA (Redis 6.2) remembers nothing from one call to the
-- next.
-- recent_bytes counts the entries in `recent` (each replaced, taken or
-- forgotten gives its bytes back), recent_n the entries themselves: a
-- generation holds at most recent_records_max of them too. What a remembered
-- record costs the server is mostly its Lua objects, which the collector
-- walks: with 16,000 small records remembered (4 MiB of them) a plain put
-- took 50-60 us inside Redis against 35 with a few hundred, and the drain
-- gained nothing (bench/results/round-2026-12-03b.notes.md). Large records
-- are few objects for their bytes: the byte cap bounds those.
local recent, previous, recent_bytes, recent_n = {}, {}, 0, 0

-- The job is remembered no more.
local function forget(jid)
  local known = recent[jid]
  if known then
    recent_bytes, recent_n = recent_bytes - 2 * #known[1], recent_n - 1
    recent[jid] = nil
  end
  previous[jid] = nil
end

local function remember(jid, raw, fields, h, data, replyable, meta)
  forget(jid)
  if #raw > LIMITS.recent_record_max_bytes then
    return
  end
  recent_bytes, recent_n = recent_bytes + 2 * #raw, recent_n + 1
  if recent_bytes > LIMITS.recent_records_bytes or recent_n > LIMITS.recent_records_max then
    previous, recent, recent_bytes, recent_n = recent, {}, 2 * #raw, 1
  end
  recent[jid] = { raw, fields, h, data, replyable, meta }
end

-- The remembered record of `jid` if `raw` is it (and, for a reply, may be
-- replied): meta, data; else nil.
local function recall(jid, raw, for_reply)
  local known = recent[jid] or previous[jid]
  if not known or known[1] ~= raw or (for_reply and not known[5]) then
    return nil
  end
  local meta = known[6]
  if meta then -- taken: whoever reads it next decodes the record
    forget(jid)
  elseif string.byte(known[2], 1) == 123 then -- '{': JSON fields
    meta = cjson.decode(known[2])
    meta.h = known[3]
  else
    meta = Compact.decode(known[2])
  end
  if known[5] then
    Json.vouch(meta)
    Json.vouch(known[4])
  end
  return meta, known[4]
end

-- The record of `jid`, checked (Job.decode), without writing: meta, data;
-- nil when there is none; or false, what is wrong with it, the raw record,
-- and its meta when that part is sound (for Job.corrupt).
function Job.read(jid, for_reply)
  local raw = redis.call('HGET', K.jobs, jid)
  if not raw then
    return nil
  end
  local meta, data = recall(jid, raw, for_reply)
  if meta then
    return meta, data
  end
  local problem, sound_meta
  meta, data, problem, sound_meta = Job.decode(raw, for_reply)
  if not meta then
    return false, problem, raw, sound_meta
  end
  if for_reply then
    Json.vouch(meta)
    Json.vouch(data)
  end
  return meta, data
end

-- The meta of a record, decoded leniently and checked for nothing (its
-- history a list, as in the JSON); nil when the record is gone or its meta
-- does not decode. For reads that only look (the script that takes the job
-- checks the rest).
function Job.glance(jid)
  local raw = redis.call('HGET', K.jobs, jid)
  local nl = raw and string.find(raw, '\n', 1, true)
  if not nl then
    return nil
  end
  if string.byte(raw, 1) ~= 123 then -- not '{': the compact form, its history a list
    local meta = Compact.decode(string.sub(raw, 1, nl - 1))
    if meta then
      meta.h = { { e = 'put', t = Job.put_ms(meta) } }
    end
    return meta
  end
  local ok, meta = Json.lenient(string.sub(raw, 1, nl - 1))
  return ok and type(meta) == 'table' and meta or nil
end

-- The order ticket (meta.o) of a waiting job, all lanes.lua reads of a record
-- to order lanes; nil when the record is gone, does not decode or is not
-- waiting. Cheaper than Job.read: the pop that takes the job checks the rest.
function Job.ticket(jid)
  local meta = Job.glance(jid)
  if meta and meta.s == WAITING and type(meta.o) == 'number' then
    return meta.o
  end
  return nil
end

-- Job.corrupt(jid, problem, raw, sound_meta, out): fails a corrupt record and
-- returns its new meta and data (Place.corrupt in place.lua, bound there);
-- Job.corrupt_view(...) the same meta and data, writing nothing.

-- The record of `jid`: meta, data, or nil. A corrupt one is failed first
-- (Job.corrupt): the caller gets the failed record.
function Job.load(jid, for_reply)
  local meta, data, raw, sound_meta = Job.read(jid, for_reply)
  if meta == false then
    return Job.corrupt(jid, data, raw, sound_meta)
  end
  return meta, data
end

-- The record of `jid` for a read-only operation (no-writes): meta, data, or nil.
-- A corrupt one answers as the failed record it becomes (Job.corrupt_view),
-- left for the next operation that writes to fail for good.
function Job.view(jid, for_reply)
  local meta, data, raw, sound_meta = Job.read(jid, for_reply)
  if meta == false then
    return Job.corrupt_view(jid, data, raw, sound_meta)
  end
  return meta, data
end

-- The record of `jid`, or NO_SUCH_JOB; a tombstone (state cancelled) is no
-- job to change either, as before tombstones were kept.
function Job.must(jid)
  local meta, data = Job.load(jid)
  if not meta then
    E.raise('NO_SUCH_JOB', 'no job ' .. jid)
  elseif meta.s == CANCELLED then
    E.raise('NO_SUCH_JOB', 'no job ' .. jid .. ': it was cancelled (by ' .. meta.cn.b
      .. '); a cancelled job cannot run again, put it anew')
  end
  return meta, data
end

-- Loops that drop corrupt or stray entries of an index share a budget per call.
local dropped, dropped_call = 0, 0 -- counted by call dropped_call

-- True while this call may drop one more entry (and counts it).
function Job.may_drop()
  if dropped_call ~= CALL then
    dropped, dropped_call = 0, CALL
  end
  if dropped >= LIMITS.drop_batch then
    return false
  end
  dropped = dropped + 1
  return true
end

-- Stores the record; returns the meta's stored text up to its history (see
-- fields_of), for a reply to reuse (Job.reply), or nil when it was stored
-- compact (Compact.encode). `done`: the caller changes the meta no more (the
-- next read may take it). The record is made in one piece: each string Lua
-- makes is hashed whole.
function Job.save(jid, meta, data, done)
  local line = Compact.encode(meta)
  if line then
    local raw = line .. '\n' .. data
    redis.call('HSET', K.jobs, jid, raw)
    remember(jid, raw, line, meta.h, data, Json.vouched(meta) and Json.vouched(data),
      done and meta or nil)
    return nil
  end
  local head, fields = fields_of(meta)
  local raw = head .. ',"h":[' .. meta.h .. ']}\n' .. data
  redis.call('HSET', K.jobs, jid, raw)
  if meta.s == COMPLETE or meta.s == FAILED or meta.s == CANCELLED then
    forget(jid)
  else
    remember(jid, raw, fields, meta.h, data, Json.vouched(meta) and Json.vouched(data),
      done and meta or nil)
  end
  return head
end

-- Events a tracked job publishes on K.events.
local PUBLISHED = { put = true, popped = true, completed = true, retried = true, failed = true,
  ['lease-lost'] = true }

-- Tells subscribers of K.events about a tracked job: {"event","jid","queue","t",...}.
function Job.publish(jid, meta, ev)
  if meta.tr and PUBLISHED[ev.e] then
    local message = { event = ev.e, jid = jid, queue = meta.q, t = ev.t, worker = ev.w,
      group = ev.g }
    redis.call('PUBLISH', K.events, cjson.encode(message))
  end
end

-- A text as JSON, made once per call (a batch's events name one worker).
local quoted = remembered(function(text)
  return cjson.encode(text)
end)

-- A history that may hold more than history_max events is at least this long.
local TRIM_BYTES = LIMITS.history_max * 15 -- {"e":"","t":0},

-- The history without its second event when it holds more than history_max
-- events. Events are objects of plain values, so '},{"' is where one ends
-- and the next begins ('{"' is never inside a string).
local function trimmed(h)
  local first = string.find(h, '},{"', 1, true)
  local at, count = first, 2
  while at and count <= LIMITS.history_max do
    at = string.find(h, '},{"', at + 1, true)
    count = count + 1
  end
  if not at then
    return h
  end
  local second = string.find(h, '},{"', first + 1, true)
  return string.sub(h, 1, first) .. string.sub(h, second + 1)
end

-- The event text that starts a history (Create.job: its put; Place.cancel).
-- `event` is one of the scripts' own names: its opening is made once while
-- the function library stays loaded, not by cjson at every put.
local openings = {}
function Job.first_event(event, now_ms, fields)
  if fields then
    return first_event_json(event, now_ms, fields)
  end
  local opening = openings[event]
  if not opening then
    opening = '{"e":' .. cjson.encode(event) .. ',"t":'
    openings[event] = opening
  end
  local h = opening .. int(now_ms) .. '}'
  if event == 'put' then -- the save that follows need not read its time back
    Compact.made_put(h, now_ms)
  end
  return h
end

-- Appends an event, unpublished; the history keeps its first event and the newest ones.
-- Returns the event (a table: e, t and `fields`).
function Job.append(meta, now_ms, event, fields)
  local ev = fields or {}
  local h = meta.h
  local w = ev.w
  if h ~= '' and type(w) == 'string' and next(ev, next(ev)) == nil then
    -- only a worker (a pop's, a completion's event): written by hand, its
    -- time formatted once per call (cjson formats every number with %.14g)
    h = h .. ',{"e":"' .. event .. '","t":' .. int(now_ms) .. ',"w":' .. quoted(w) .. '}'
  elseif h == '' then
    h = first_event_json(event, now_ms, ev)
  else
    ev.e, ev.t = event, now_ms
    h = h .. ',' .. cjson.encode(ev)
  end
  if #h > TRIM_BYTES then
    h = trimmed(h)
  end
  meta.h = h
  ev.e, ev.t = event, now_ms
  return ev
end

-- Appends an event and publishes it (a tracked job).
function Job.event(jid, meta, now_ms, event, fields)
  Job.publish(jid, meta, Job.append(meta, now_ms, event, fields))
end

-- The state a reader sees: a waiting job whose lane is over its limit is throttled.
function Job.visible_state(meta)
  if meta.s == WAITING and meta.dm then
    local lane = (meta.p or 0) .. '|' .. meta.dm
    if redis.call('ZSCORE', K.throttled(meta.q), lane) then
      return THROTTLED
    end
  end
  return meta.s
end

-- {"jid":..,"meta":{..},"data":{..}} plus any pre-encoded extra fields (names
-- that are the scripts' own identifiers: nothing to escape): what a read
-- answers. Its meta never carries the lease token (l): a token is the holder's
-- credential, handed out by the lease replies alone (Job.lease_reply), so no
-- reader, the dashboard's and the CLI's included, can report on a job it does
-- not hold.
function Job.reply(jid, meta, data, extra)
  local token = meta.l
  meta.l = nil
  local head = fields_of(meta)
  meta.l = token
  local object, result = Job.split(meta, data)
  local text = '{"jid":' .. cjson.encode(jid) .. ',"meta":' .. head .. ',"h":[' .. meta.h .. ']}'
    .. ',"data":' .. object
  if result then
    text = text .. ',"result":' .. result
  end
  if extra then
    for i = 1, #extra do
      text = text .. ',"' .. extra[i][1] .. '":' .. extra[i][2]
    end
  end
  return text .. '}'
end

-- The reply of a job just leased (lib/lease.lua): its meta with the lease
-- token, then `tail` (more fields already written as JSON: ',"name":value...').
-- `head` is what Job.save returned for the meta, when at hand. One string made,
-- not three.
function Job.lease_reply(jid, meta, data, head, tail)
  local object = Job.split(meta, data)
  return '{"jid":' .. cjson.encode(jid) .. ',"meta":' .. (head or fields_of(meta)) .. ',"h":['
    .. meta.h
    .. ']},"data":' .. object .. tail .. '}'
end

-- A history note for a failed attempt: for a klass not found, the message's
-- last line ("not importable on host X: ..."), so the history tells which
-- host could not import it (a rolling deploy); nil for every other group.
function Job.failure_note(group, message)
  if group ~= GROUP.KLASS_NOT_FOUND or type(message) ~= 'string' then
    return nil
  end
  local last = string.match(message, '([^\n]+)\n*$')
  return last and Text.head(last, LIMITS.note_max_bytes) or nil
end

-- Cuts a failure message to the cap, keeping its tail (where a traceback ends);
-- bytes that are not UTF-8 are escaped first.
function Job.cap_message(message)
  return Text.tail(message, LIMITS.message_max_bytes)
end
end -- of job.lua's own locals
