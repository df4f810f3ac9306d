-- peek.lua: the next jobs a pop of this queue would take, without taking them.
-- Due scheduled jobs are promoted first, as a pop would.
--
-- KEYS[1]  the namespace root
-- ARGV     queue, count (1..peek_max)
-- Reply    JSON list of jobs {"jid", "meta", "data", "state"}. A job whose
--          record does not decode is failed on the way (runtime.CorruptJob,
--          lib/job.lua), taken out of its lane, and listed as that failed
--          record, in the place a pop would have met it.
-- Errors   BAD_ARG

local queue = Check.queue('queue', ARGV[1])
local count = Check.int('count', ARGV[2], 1, LIMITS.peek_max)
Place.promote(queue, Clock.now_us())
local out = {}
local jids, from = Lanes.peek(queue, count)
for _, jid in ipairs(jids) do
  local meta, data, raw, sound_meta = Job.read(jid, true)
  local failed_now = meta == false
  if failed_now and sound_meta then -- its meta says where it sits
    meta, data = Job.corrupt(jid, data, raw, sound_meta)
  elseif failed_now then -- only its lane does
    local prio, domain = from[jid][1], from[jid][2]
    Lanes.remove(queue, jid, { p = tonumber(prio), dm = domain ~= '' and domain or nil })
    meta, data = Job.corrupt(jid, data, raw, nil, queue)
  end
  if failed_now or (meta and meta.s == 'waiting') then -- not what a pop drops unseen
    out[#out + 1] = Job.reply(jid, meta, data, { { 'state', cjson.encode(meta.s) } })
  end
end
return '[' .. table.concat(out, ',') .. ']'
