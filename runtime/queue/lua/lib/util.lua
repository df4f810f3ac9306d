-- util.lua: coded errors, argument checks, text and JSON helpers.
--
-- E.raise(code, msg) aborts the operation; the runner that wraps every script
-- turns it into the error reply "CODE msg". Codes come from the closed list
-- ERROR_CODES (rendered from runtime/errors.py). Checks raise BAD_ARG.
--
-- cjson encodes numbers with 14 significant digits, so JSON only ever holds
-- times in milliseconds; microseconds stay in zset scores.
--
-- What is stored or replied must decode in Python: valid UTF-8 (cjson does not
-- check it) and strict JSON (Json.strict: no hex, nan or inf numbers, which
-- cjson accepts by default), nested at most data_depth_max levels.

-- A table of state kept for one call, made ready for the next: emptied in place
-- (a table made per call costs the collector), or a new one when `big` (a call
-- filled it with more than a few entries: clearing would cost more).
local function emptied(t, big)
  if big then
    return {}
  end
  for key in pairs(t) do
    t[key] = nil
  end
  return t
end

local E = {}

function E.raise(code, msg)
  if not ERROR_CODES[code] then
    error('unknown error code ' .. tostring(code))
  end
  error({ code = code, msg = msg }, 0)
end

function E.bad(msg)
  E.raise('BAD_ARG', msg)
end

-- Runs fn(...) for one item of a batch: true, result; or false, code, message
-- for a coded error (the item changed nothing, except that a record found
-- corrupt was failed first: Job.load). Other errors propagate.
function E.attempt(fn, ...)
  local ok, result = pcall(fn, ...)
  if ok then
    return true, result
  end
  if type(result) == 'table' and result.code then
    return false, result.code, result.msg
  end
  error(result, 0)
end

local Text = {}

-- Valid UTF-8 sequences after their lead byte; lead and continuation bytes
-- are disjoint, so each pattern only ever matches at a lead byte.
local UTF8_SEQUENCES = {
  '[\194-\223][\128-\191]',
  '\224[\160-\191][\128-\191]',
  '[\225-\236\238\239][\128-\191][\128-\191]',
  '\237[\128-\159][\128-\191]', -- no surrogates
  '\240[\144-\191][\128-\191][\128-\191]',
  '[\241-\243][\128-\191][\128-\191][\128-\191]',
  '\244[\128-\143][\128-\191][\128-\191]',
}

-- True when `s` is valid UTF-8. ASCII text costs one match (an anchored run
-- of a one-range class: about twice as fast as searching for a high byte).
function Text.utf8(s)
  if string.find(s, '^[^\128-\255]*$') then
    return true
  end
  for _, seq in ipairs(UTF8_SEQUENCES) do
    s = string.gsub(s, seq, '.') -- a placeholder, so no new sequence forms
  end
  return not string.find(s, '[\128-\255]')
end

local function hex_byte(c)
  return string.format('\\x%02x', string.byte(c))
end

-- Bytes as printable ASCII: backslash, control and non-ASCII bytes as \xHH.
function Text.escape(s)
  return (string.gsub(s, '[%z\1-\31\\\127-\255]', hex_byte))
end

-- Free text (a failure message) made safe to store: unchanged when valid
-- UTF-8, else its non-ASCII bytes escaped.
function Text.clean(s)
  if Text.utf8(s) then
    return s
  end
  return (string.gsub(s, '[\127-\255]', hex_byte))
end

-- Never start or end a cut inside a UTF-8 sequence: continuation bytes are 0x80-0xBF.
local function continuation(s, at)
  local b = string.byte(s, at)
  return b ~= nil and b >= 128 and b < 192
end

-- Free text cut to `cap` bytes keeping its tail (where a traceback or a log
-- ends), after a marker saying how much was cut; Text.clean first.
function Text.tail(s, cap)
  s = Text.clean(s)
  if #s <= cap then
    return s
  end
  local marker = '[... cut ' .. (#s - cap) .. ' bytes ...]\n'
  local start = #s - cap + #marker + 1
  while start <= #s and continuation(s, start) do
    start = start + 1
  end
  return marker .. string.sub(s, start)
end

-- Free text cut to its first `cap` bytes (a note, a progress message); Text.clean first.
function Text.head(s, cap)
  s = Text.clean(s)
  if #s <= cap then
    return s
  end
  local stop = cap
  while stop > 0 and continuation(s, stop + 1) do
    stop = stop - 1
  end
  return string.sub(s, 1, stop)
end

local Check = {}
local Json = {} -- below; Check.data uses it

-- A value in an error message: strings cut to 80 bytes, printable ASCII
-- (Text.escape), so the reply is one line of valid UTF-8 whatever was given.
local function show(value)
  if type(value) == 'string' then
    return '"' .. Text.escape(string.sub(value, 1, 80)) .. '"'
  end
  return tostring(value)
end

-- A number (string or JSON number), finite, within [lo, hi]; integral unless `fractional`.
function Check.number(name, value, lo, hi, fractional)
  local n = tonumber(value)
  if n == nil or n ~= n or n == math.huge or n == -math.huge
      or (not fractional and n % 1 ~= 0) or n < lo or n > hi then
    local what = fractional and 'a number' or 'an integer'
    E.bad(name .. ' must be ' .. what .. ' in [' .. string.format('%.17g', lo) .. ', '
      .. string.format('%.17g', hi) .. '], got ' .. show(value))
  end
  return n
end

function Check.int(name, value, lo, hi)
  return Check.number(name, value, lo, hi, false)
end

-- A printable token: no blanks, no control characters, 1..max bytes of UTF-8.
-- Printable ASCII (jids, queue names, tags as a rule) passes with one anchored
-- run of a one-range class; anything else gets the full check.
function Check.token(name, value, max)
  if type(value) == 'string' and #value <= max and string.find(value, '^[!-~]+$') then
    return value
  end
  if type(value) ~= 'string' or #value == 0 or #value > max or string.find(value, '[%s%c]')
      or not Text.utf8(value) then
    E.bad(name .. ' must be 1-' .. max .. ' printable characters without blanks, got '
      .. show(value))
  end
  return value
end

-- Texts a check found good, remembered while the function library stays loaded
-- (a call by EVALSHA starts afresh): each check is a pure function of its text,
-- and a deployment has few queues and classes. At most GOOD_MAX of each kind,
-- then forgotten all at once.
local GOOD_MAX = 1000
local function good_set()
  local set, n = {}, 0
  return function(value)
    return set[value] == true
  end, function(value)
    if n >= GOOD_MAX then
      set, n = {}, 0
    end
    set[value], n = true, n + 1
  end
end
local good_queue, remember_queue = good_set()
local good_klass, remember_klass = good_set()

function Check.queue(name, value)
  if good_queue(value) then
    return value
  end
  Check.token(name, value, 128)
  if string.find(value, '[{}:]') then
    E.bad(name .. ' must not contain "{", "}" or ":", got ' .. show(value))
  end
  remember_queue(value)
  return value
end

-- "package.module:function" or "package.module.function": dotted identifiers.
function Check.klass(value)
  if good_klass(value) then
    return value
  end
  if type(value) ~= 'string' or #value > 512 then
    E.bad('klass must be an import path like "package.module:function", got ' .. show(value))
  end
  local module, attr = string.match(value, '^([%w_%.]+):([%w_%.]+)$')
  if not module then
    module, attr = string.match(value, '^([%w_%.]+)%.([%w_]+)$')
  end
  local ok = module ~= nil
  if ok then
    for _, part in ipairs({ module, attr }) do
      for ident in string.gmatch(part .. '.', '([^%.]*)%.') do
        if not string.find(ident, '^[%a_][%w_]*$') then
          ok = false
        end
      end
    end
  end
  if not ok then
    E.bad('klass must be an import path like "package.module:function", got ' .. show(value))
  end
  remember_klass(value)
  return value
end

-- Job data: the text of one JSON object, within the size cap. Checked once
-- (after the cheap checks) by Json.checked, as every stored record is
-- checked when read (Job.read). The text is stored as given.
function Check.data(value, max_bytes)
  if type(value) ~= 'string' or string.sub(value, 1, 1) ~= '{' or string.sub(value, -1) ~= '}' then
    E.bad('data must be a JSON object')
  end
  if #value > max_bytes then
    E.bad('data is ' .. #value .. ' bytes, over the limit of ' .. max_bytes .. ' (max-data-bytes)')
  end
  local decoded, problem = Json.checked(value)
  if problem == Json.DEEP then
    E.bad('data is ' .. Json.DEEP .. ' (data_depth_max)')
  elseif not decoded then
    E.bad('data must be a JSON object (' .. problem .. '), got ' .. show(value))
  end
  Json.vouch(value)
  return value
end

-- A JSON array of tokens (jids, tags), or nil/empty.
function Check.tokens(name, value, max_each, max_count)
  if value == nil or value == cjson.null then
    return {}
  end
  if type(value) ~= 'table' then
    E.bad(name .. ' must be a list')
  end
  if #value > max_count then
    E.bad(name .. ' has ' .. #value .. ' entries, more than ' .. max_count)
  end
  for _, v in ipairs(value) do
    Check.token(name .. ' entry', v, max_each)
  end
  return value
end

function Check.optional(value)
  if value == cjson.null then
    return nil
  end
  return value
end

-- What Json.checked says about text nested too deep.
Json.DEEP = 'nested deeper than ' .. LIMITS.data_depth_max .. ' levels'

-- cjson's decoder settings are global to the server's Lua, shared with other
-- code, so strict decoding has a cjson of its own (cjson.new(): settings of its
-- own), made on its first use and kept while the function library stays
-- loaded (a script run by EVALSHA makes it afresh). The server's cjson is never
-- changed: setting it and putting it back around every call was a sixth of a
-- put's data check. Lenient decodes (Json.lenient) run with the caller's settings.
local strict, strict_depth -- the strict cjson, and the max depth it has

-- Decodes `text` as strict JSON nested at most `max_depth` (default:
-- data_depth_max) levels: true, value; or false, Json.DEEP or the decoder's
-- complaint.
function Json.strict(text, max_depth)
  max_depth = max_depth or LIMITS.data_depth_max
  if not strict then
    strict = cjson.new()
    strict.decode_invalid_numbers(false)
    strict_depth = nil
  end
  if strict_depth ~= max_depth then
    strict.decode_max_depth(max_depth)
    strict_depth = max_depth
  end
  local ok, value = pcall(strict.decode, text)
  if not ok and string.find(tostring(value), 'too many nested', 1, true) then
    return false, Json.DEEP
  end
  return ok, value
end

-- Decodes `text` with the caller's settings: true, value; or false, the complaint.
function Json.lenient(text)
  return pcall(cjson.decode, text)
end

-- The object `text` holds, if Python decodes it too (valid UTF-8, strict
-- numbers, at most data_depth_max levels); else nil and what is wrong with it
-- ('not a JSON object', 'not valid UTF-8', 'not valid JSON', Json.DEEP). The
-- braces tell an object from an array (cjson decodes [] and {} alike).
-- `utf8`: the caller checked that already.
function Json.checked(text, utf8)
  if string.sub(text, 1, 1) ~= '{' then
    return nil, 'not a JSON object'
  end
  if not utf8 and not Text.utf8(text) then
    return nil, 'not valid UTF-8'
  end
  local ok, value = Json.strict(text)
  if value == Json.DEEP then
    return nil, Json.DEEP
  elseif not ok then
    return nil, 'not valid JSON'
  elseif type(value) ~= 'table' then
    return nil, 'not a JSON object'
  end
  return value
end

-- Values known, in this call, to be what Python decodes: job data checked
-- (Check.data) or read for a reply, metas so read or made by the scripts.
-- A record saved from a vouched meta and data needs no check to be replied
-- (Job.save remembers it so).
-- Emptied in place when a new call vouches (made anew after a big batch).
local vouched, vouched_n, vouched_call = {}, 0, 0 -- of call number vouched_call (CALL)

function Json.vouch(value)
  if vouched_call ~= CALL then
    vouched = emptied(vouched, vouched_n > 32)
    vouched_n, vouched_call = 0, CALL
  end
  if not vouched[value] then
    vouched[value], vouched_n = true, vouched_n + 1
  end
end

function Json.vouched(value)
  return vouched_call == CALL and vouched[value] == true
end

function Json.decode(name, text)
  local ok, value = Json.lenient(text)
  if not ok or type(value) ~= 'table' then
    E.bad(name .. ' is not a JSON object')
  end
  return value
end

-- cjson writes an empty table as {}; lists must stay lists.
function Json.array(list)
  if #list == 0 then
    return '[]'
  end
  return cjson.encode(list)
end

-- Splices pre-encoded JSON values into an object: fields = { {name, json}, ... }.
function Json.object(fields)
  local parts = {}
  for i, f in ipairs(fields) do
    parts[i] = cjson.encode(f[1]) .. ':' .. f[2]
  end
  return '{' .. table.concat(parts, ',') .. '}'
end

-- `format` of a number, remembered: a batch writes the same times, counts and
-- scores for every job, and formatting a number costs as much as a Redis
-- command. For the length of a call (CALL); with `for_good`, for a format that is a
-- pure function of the number, while the function library stays loaded (at
-- most MEMO_MAX numbers, then forgotten at once: no reset paid by every call).
local MEMO_MAX = 2000
local function remembered(format, for_good)
  local memo, count, memo_call = {}, 0, 0
  return function(n)
    if not for_good and memo_call ~= CALL then
      memo, count, memo_call = {}, 0, CALL
    end
    local text = memo[n]
    if text == nil then
      text = format(n)
      if n == n then -- NaN is no table key
        if count >= MEMO_MAX then
          memo, count = {}, 0
        end
        memo[n], count = text, count + 1
      end
    end
    return text
  end
end

-- Integer to string without exponent (tostring gives 1.79e+15 for microseconds).
-- Numbers passed to redis.call go through it too (Redis formats a Lua number
-- argument with snprintf).
-- Small numbers (counts, limits, priorities) are remembered for good; large
-- ones (times, tickets) rarely come again after their call, and remembering
-- each for good churned the memo (2,000 entries, then dropped), which cost a
-- put more than formatting them: they are remembered for the call (a batch
-- writes its call's times once per job), in a table emptied in place.
local small_int = remembered(function(n)
  return string.format('%d', n)
end, true)
local large, large_count, large_call = {}, 0, 0

local function int(n)
  if n < 1000000 and n > -1000000 then
    return small_int(n)
  end
  if large_call ~= CALL then
    large = emptied(large, large_count > 32)
    large_count, large_call = 0, CALL
  end
  local text = large[n]
  if text == nil then
    text = string.format('%d', n)
    if large_count < MEMO_MAX and n == n then -- NaN is no table key
      large[n], large_count = text, large_count + 1
    end
  end
  return text
end

-- JSON of a number as cjson writes it (cjson is bound per call, not at load).
Json.number = remembered(function(n)
  return cjson.encode(n)
end)

-- The reply entry of one batch item: {"jid":..,"ok":true,...} or {"jid":..,"error":..}.
function E.item(jid, ok, result, message)
  if ok then
    return '{"jid":' .. cjson.encode(jid) .. ',"ok":true,"state":'
      .. (STORED_STATES[result] or cjson.encode(result)) .. '}'
  end
  return cjson.encode({ jid = jid, error = result, message = message })
end
