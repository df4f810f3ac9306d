-- compact.lua: a queued job's meta in the compact form, and whether a call
-- writes it (job.lua reads and writes records; this file only their metas'
-- compact text).
--
-- A queued job's meta may also be stored compact (Compact.enabled: the shared
-- setting compact-records at 1, or unset while every registered master reads
-- compact records): a state letter (w waiting, s scheduled), then fields
-- separated by one space:
--
--   <w|s><id, hex> <o, hex> <put time ms, hex>[ r<r>][ m<m>][ p<p>][ d<d, hex>]
--     [ e<qt, hex>][ n<dm>]
--
-- id names its queue and klass in K.names, where each pair gets a number the
-- first time a compact record needs it; once K.names holds names_max pairs,
-- a new pair is written in full instead, with the letter in capitals:
--
--   <W|S><k> <q> <o, hex> <put time ms, hex>[ the same options]
--
-- A call looks each pair up in K.names once (pair_id, pair_of); nothing it
-- found serves the next call, since K.names may be replaced under a running
-- server (a failover back and forth, a restore) and a number found before
-- could then name another pair.
--
-- r absent: the default retries; m absent: r; its history is its put alone
-- ({"e":"put","t":<put time>}, rebuilt when read). Only a meta of nothing else
-- is written so (a fresh waiting or scheduled job: most of a backlog); any
-- other stays JSON. k, q and dm are tokens (no blanks), so a space ends each.
-- This release reads both forms always; it writes the compact one only when
-- told to, or while no master of a release before it is registered (README,
-- "Upgrading"): such a release fails a compact record as runtime.CorruptJob.

local Compact = {}
do -- this file's own locals end with it: a library's main chunk holds at most 200

-- The compact meta (see the top): letters of the states it holds (for a
-- named pair, and for a pair written in full), and of the fields it may
-- carry besides k, q, s, o and h.
local STATE_LETTER = { [WAITING] = 'w', [SCHEDULED] = 's' }
local STATE_CAPITAL = { [WAITING] = 'W', [SCHEDULED] = 'S' }
local LETTER_STATE = { w = WAITING, s = SCHEDULED, W = WAITING, S = SCHEDULED }

-- The pairs of K.names looked up, each with the number of the call (CALL)
-- that looked it up: pair_ids[queue][klass] = {id, call} (id FULL or BLANK:
-- none to be had), pair_names[id] = {queue, klass, call} (queue false: not
-- there). An entry of an earlier call is looked up again, as if it were not
-- there (see the top), save whether its names hold a blank; the entries
-- outlive their call so that a call makes no tables (four new tables a put
-- cost it about 5k instructions) and a known pair's names are not searched
-- again. A call that finds more than NAMES_KEPT of them starts afresh.
local NAMES_KEPT = 1000
local pair_ids, pair_names, names_n, names_call = {}, {}, 0, 0
local FULL, BLANK = 'full', 'blank' -- pair_ids' marks: no room left; a name with a blank

-- Makes the entries ready for this call: forgotten when too many.
local function names_for_call()
  if names_call ~= CALL then
    if names_n > NAMES_KEPT then
      pair_ids, pair_names, names_n = {}, {}, 0
    end
    names_call = CALL
  end
end

-- Records what this call found `id` names (queue nil: nothing).
local function name_pair(id, queue, klass)
  local named = pair_names[id]
  if not named then
    named, names_n = {}, names_n + 1
    pair_names[id] = named
  end
  named[1], named[2], named[3] = queue or false, klass, CALL
  return named
end

-- The id (hex) of the pair, given one if it has none and K.names has room;
-- nil when it has none (the record names them in full), false when either
-- name holds a blank (no compact form: not from a checked put).
local function pair_id(queue, klass)
  names_for_call()
  local of_queue = pair_ids[queue]
  if not of_queue then
    of_queue = {}
    pair_ids[queue] = of_queue
  end
  local entry = of_queue[klass]
  if not entry then
    entry, names_n = { false, 0 }, names_n + 1
    of_queue[klass] = entry
  end
  local id = entry[1]
  if entry[2] ~= CALL then
    -- what two texts hold never goes stale: an entry of an earlier call that
    -- is not BLANK says neither name holds one (two string.find spared, ~4k)
    if id == BLANK or (not id and (string.find(queue, '%s') or string.find(klass, '%s'))) then
      id = BLANK
    else
      local pair = queue .. ' ' .. klass
      id = redis.call('HGET', K.names, '=' .. pair)
      if not id and tonumber(redis.call('HGET', K.names, 'count') or '0') < LIMITS.names_max then
        id = string.format('%x', redis.call('HINCRBY', K.names, 'count', '1'))
        redis.call('HSET', K.names, '=' .. pair, id, '#' .. id, pair)
      end
      if id then
        name_pair(id, queue, klass)
      else
        id = FULL
      end
    end
    entry[1], entry[2] = id, CALL
  end
  if id == FULL then
    return nil
  elseif id == BLANK then
    return false
  end
  return id
end

-- The queue and klass that id names; nil when K.names has no such pair.
local function pair_of(id)
  local named = pair_names[id]
  if not (named and named[3] == CALL) then
    names_for_call()
    local text = redis.call('HGET', K.names, '#' .. id)
    named = name_pair(id, string.match(text or '', '^(%S+) (%S+)$'))
  end
  if named[1] then
    return named[1], named[2]
  end
  return nil
end
local COMPACT_FIELDS = { k = true, q = true, s = true, r = true, m = true, o = true, h = true,
  p = true, d = true, qt = true, dm = true }

-- A whole number as hex, or nil when it is not a whole number in [0, 2^53].
local function hex(n)
  if type(n) ~= 'number' or n < 0 or n % 1 ~= 0 or n > 9007199254740992 then
    return nil
  end
  return string.format('%x', n)
end

-- A whole number as decimal text, or nil.
local function whole(n)
  if type(n) ~= 'number' or n % 1 ~= 0 or n < -9007199254740992 or n > 9007199254740992 then
    return nil
  end
  return int(n)
end

-- The put event Job.first_event made last (its text, and its time in ms): a
-- put saves the meta it just made, and compact_of takes the time from here
-- rather than matching it out of that text again (string.match, then
-- tonumber: about 3k instructions a put). The text names its time, so the
-- pair is never stale.
local made_put_h, made_put_ms = nil, nil

function Compact.made_put(h, put_ms)
  made_put_h, made_put_ms = h, put_ms
end

-- The meta in the compact form, or nil when it holds more than that form
-- says (it is then stored as JSON).
local function compact_of(meta)
  local letter, k, q, h = STATE_LETTER[meta.s], meta.k, meta.q, meta.h
  if not letter then
    return nil
  end
  local put_ms = made_put_ms
  if h ~= made_put_h then
    put_ms = string.match(h, '^{"e":"put","t":(%d+)}$')
    if not put_ms then
      return nil
    end
    put_ms = tonumber(put_ms)
  end
  for name in pairs(meta) do
    if not COMPACT_FIELDS[name] then
      return nil
    end
  end
  local o, put = hex(meta.o), hex(put_ms)
  if not (o and put) then
    return nil
  end
  local id, line = pair_id(q, k), nil
  if id then
    line = letter .. id .. ' ' .. o .. ' ' .. put
  elseif id == false then -- a pair of names with blanks (not from a checked put)
    return nil
  else
    line = STATE_CAPITAL[meta.s] .. k .. ' ' .. q .. ' ' .. o .. ' ' .. put
  end
  local r, m, p, d, qt, dm = meta.r, meta.m, meta.p, meta.d, meta.qt, meta.dm
  if r ~= LIMITS.default_retries then
    r = whole(r)
    if not r then
      return nil
    end
    line = line .. ' r' .. r
  end
  if m ~= meta.r then
    m = whole(m)
    if not m then
      return nil
    end
    line = line .. ' m' .. m
  end
  if p then
    p = whole(p)
    if not p then
      return nil
    end
    line = line .. ' p' .. p
  end
  if d then
    d = hex(d)
    if not d then
      return nil
    end
    line = line .. ' d' .. d
  end
  if qt then
    qt = hex(qt)
    if not qt then
      return nil
    end
    line = line .. ' e' .. qt
  end
  if dm then
    if string.find(dm, '%s') then
      return nil
    end
    line = line .. ' n' .. dm
  end
  return line
end

-- Sets one optional field of a compact meta from its letter and text;
-- false when either is not what the form allows.
local COMPACT_OPTIONS = {
  r = function(meta, text) meta.r = tonumber(text, 10) return meta.r ~= nil end,
  m = function(meta, text) meta.m = tonumber(text, 10) return meta.m ~= nil end,
  p = function(meta, text) meta.p = tonumber(text, 10) return meta.p ~= nil end,
  d = function(meta, text) meta.d = tonumber(text, 16) return meta.d ~= nil end,
  e = function(meta, text) meta.qt = tonumber(text, 16) return meta.qt ~= nil end,
  n = function(meta, text) meta.dm = text return true end,
}

-- A compact meta line, decoded (meta.h the put event's text): meta; or nil
-- and what is wrong.
local function decode_compact(line)
  local letter, id, o, t, rest = string.match(line, '^([ws])(%x+) (%x+) (%x+)(.*)$')
  local k, q
  if letter then
    q, k = pair_of(id)
    if not q then
      return nil, 'meta names an unknown queue and klass (' .. id .. ')'
    end
  else
    letter, k, q, o, t, rest = string.match(line, '^([WS])(%S+) (%S+) (%x+) (%x+)(.*)$')
    if not letter then
      return nil, 'meta is neither JSON nor compact'
    end
  end
  t = tonumber(t, 16)
  local meta = { k = k, q = q, s = LETTER_STATE[letter], r = LIMITS.default_retries,
    o = tonumber(o, 16), h = '{"e":"put","t":' .. int(t) .. '}', m = nil }
  if rest ~= '' then
    local seen, good = {}, true
    local left = string.gsub(rest, ' (%l)(%S+)', function(name, text)
      local set = COMPACT_OPTIONS[name]
      if seen[name] or not set or not set(meta, text) then
        good = false
      end
      seen[name] = true
      return ''
    end)
    if left ~= '' or not good then
      return nil, 'meta has a bad compact field'
    end
  end
  meta.m = meta.m or meta.r
  return meta
end

-- The record forms a master of this release reads: 1 JSON metas, 2 compact
-- ones too (runtime.queue.job.RECORDS).
local READS_COMPACT = 2
-- How long a call's finding of the registered masters' forms serves later calls.
local FORMS_KEPT_MS = 10000
-- Masters that told who they are within this long count (worker_info.lua keeps it).
local TOLD_WITHIN_MS = 3600 * 1000

-- Findings this server made, per namespace: {fewest, from_us, until_us}. A
-- function library's locals live from one call to the next (an EVALSHA
-- script's do not: it starts afresh each call and reads the key), so a put
-- within a finding's span reads nothing. Only a finding made here is kept,
-- with the span its key was given: it ends when the key expires, never later.
-- A clock that went back (a restore, a test's clock) ends it too.
local found_here, found_count = {}, 0
local FOUND_MAX = 64 -- namespaces kept at once

-- The fewest record forms a registered master reads (READS_COMPACT with none
-- registered): the masters seen within TOLD_WITHIN_MS that told their info,
-- at most workers_max of them; one that tells no `records` runs a release
-- before compact records. Kept in K.record_forms for FORMS_KEPT_MS, and by
-- the server that found it (found_here), so a put reads at most one key: a
-- master of an earlier release registering is seen within that long (README,
-- "Upgrading").
local function fewest_forms()
  local now_us = Clock.now_us()
  local mine = found_here[NS]
  if mine and mine[2] <= now_us and now_us < mine[3] then
    return mine[1]
  end
  local kept = redis.call('GET', K.record_forms)
  if kept then
    return tonumber(kept)
  end
  local since = Clock.ms(now_us) - TOLD_WITHIN_MS
  local ids = redis.call('ZREVRANGEBYSCORE', K.workers, '+inf', since, 'LIMIT', 0,
    LIMITS.workers_max)
  local fewest = READS_COMPACT
  for _, id in ipairs(ids) do -- GET, not MGET: the ACL of docs/redis.md grants no MGET
    local ok, info = Json.lenient(redis.call('GET', K.worker_info(id)) or '')
    if ok and type(info) == 'table' then
      fewest = math.min(fewest, type(info.records) == 'number' and info.records or 1)
      if fewest < READS_COMPACT then
        break
      end
    end
  end
  redis.call('SET', K.record_forms, fewest, 'PX', FORMS_KEPT_MS)
  if not found_here[NS] then
    if found_count >= FOUND_MAX then -- namespaces come and go (tests)
      found_here, found_count = {}, 0
    end
    found_count = found_count + 1
  end
  found_here[NS] = { fewest, now_us, now_us + FORMS_KEPT_MS * 1000 }
  return fewest
end

local compact_now, compact_call = false, nil -- found by call number compact_call

-- Whether this call stores queued jobs' metas compact: the shared setting
-- compact-records when it is 0 or 1; unset (-1, auto), when every registered
-- master reads compact records (fewest_forms). Found once per call.
function Compact.enabled()
  if compact_call ~= CALL then
    local setting = Config.get('compact-records')
    if setting == 0 or setting == 1 then
      compact_now = setting == 1
    else
      compact_now = fewest_forms() >= READS_COMPACT
    end
    compact_call = CALL
  end
  return compact_now
end

-- The meta's compact line, or nil when it is stored as JSON (its state has no
-- letter, this call writes no compact records, or it holds more than the form).
function Compact.encode(meta)
  return STATE_LETTER[meta.s] and Compact.enabled() and compact_of(meta) or nil
end

Compact.decode = decode_compact
end -- of compact.lua's own locals
