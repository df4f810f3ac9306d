-- util.lua: coded errors, argument checks, JSON helpers.
--
-- E.raise(code, msg) aborts the operation; the runner that wraps every script
-- turns it into the error reply "CODE msg". Codes come from the closed list
-- ERROR_CODES (rendered from runtime/errors.py). Checks raise BAD_ARG.
--
-- cjson encodes numbers with 14 significant digits, so JSON only ever holds
-- times in milliseconds; microseconds stay in zset scores.

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
-- for a coded error (the item changed nothing). Other errors propagate.
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

local Check = {}

local function show(value)
  if type(value) == 'string' then
    return string.format('%q', string.sub(value, 1, 80))
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

-- A printable token: no blanks, no control characters, 1..max bytes.
function Check.token(name, value, max)
  if type(value) ~= 'string' or #value == 0 or #value > max or string.find(value, '[%s%c]') then
    E.bad(name .. ' must be 1-' .. max .. ' printable characters without blanks, got ' .. show(value))
  end
  return value
end

function Check.queue(name, value)
  Check.token(name, value, 128)
  if string.find(value, '[{}:]') then
    E.bad(name .. ' must not contain "{", "}" or ":", got ' .. show(value))
  end
  return value
end

-- "package.module:function" or "package.module.function": dotted identifiers.
function Check.klass(value)
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
  return value
end

-- Job data: the text of one JSON object, within the size cap. Decoded once
-- (after the cheap checks) to prove it parses; cjson decodes [] and {} alike,
-- so the braces are what rules out arrays. The text is stored as given.
function Check.data(value, max_bytes)
  if type(value) ~= 'string' or string.sub(value, 1, 1) ~= '{' or string.sub(value, -1) ~= '}' then
    E.bad('data must be a JSON object')
  end
  if #value > max_bytes then
    E.bad('data is ' .. #value .. ' bytes, over the limit of ' .. max_bytes .. ' (max-data-bytes)')
  end
  local ok, decoded = pcall(cjson.decode, value)
  if not ok or type(decoded) ~= 'table' then
    E.bad('data must be a JSON object, got ' .. show(value))
  end
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

local Json = {}

function Json.decode(name, text)
  local ok, value = pcall(cjson.decode, text)
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

-- Integer to string without exponent (tostring gives 1.79e+15 for microseconds).
local function int(n)
  return string.format('%d', n)
end

-- The reply entry of one batch item: {"jid":..,"ok":true,...} or {"jid":..,"error":..}.
function E.item(jid, ok, result, message)
  if ok then
    return Json.object({ { 'jid', cjson.encode(jid) }, { 'ok', 'true' }, { 'state', cjson.encode(result) } })
  end
  return cjson.encode({ jid = jid, error = result, message = message })
end
