-- workers.lua: the masters that popped or renewed recently, and what they hold.
--
-- KEYS[1]  the namespace root
-- ARGV     (none)
-- Reply    {"<worker>": {"seen_ms": n, "jobs": [jid, ...]}, ...}, at most
--          workers_max, most recently seen first
-- Errors   none

local rows = redis.call('ZREVRANGE', K.workers, 0, LIMITS.workers_max - 1, 'WITHSCORES')
local parts = {}
for i = 1, #rows, 2 do
  local worker = rows[i]
  parts[#parts + 1] = cjson.encode(worker) .. ':{"seen_ms":' .. int(tonumber(rows[i + 1]))
    .. ',"jobs":' .. Json.array(redis.call('SMEMBERS', K.worker_jobs(worker))) .. '}'
end
return '{' .. table.concat(parts, ',') .. '}'
