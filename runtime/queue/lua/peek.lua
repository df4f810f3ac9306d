-- peek.lua: the next jobs a pop of this queue would take, without taking them.
-- Due scheduled jobs are promoted first, as a pop would.
--
-- KEYS[1]  the namespace root
-- ARGV     queue, count (1..peek_max)
-- Reply    JSON list of jobs {"jid", "meta", "data", "state"}
-- Errors   BAD_ARG

local queue = Check.queue('queue', ARGV[1])
local count = Check.int('count', ARGV[2], 1, LIMITS.peek_max)
Place.promote(queue, Clock.now_us())
local out = {}
for i, jid in ipairs(Lanes.peek(queue, count)) do
  local meta, data = Job.load(jid)
  out[i] = Job.reply(jid, meta, data, { { 'state', cjson.encode(meta.s) } })
end
return '[' .. table.concat(out, ',') .. ']'
