-- get.lua: reads jobs with their whole history.
--
-- KEYS[1]  the namespace root
-- ARGV     jid_1, jid_2, ...
-- Reply    JSON list, per jid: null, or {"jid", "meta", "data", "state",
--          "lease_expires_ms" (running jobs), "depends" [jids it waits on],
--          "dependents" [jids waiting on it]}
--          state is meta.s except "throttled" for a waiting job whose domain
--          is over its limit right now.
-- Errors   BAD_ARG for more than get_max jids

if #ARGV > LIMITS.get_max then
  E.bad('get takes at most ' .. LIMITS.get_max .. ' jids per call')
end
local out = {}
for i, jid in ipairs(ARGV) do
  local meta, data = Job.load(jid)
  if meta then
    local expiry = meta.s == 'running' and Lease.expiry(jid, meta)
    out[i] = Job.reply(jid, meta, data, {
      { 'state', cjson.encode(Job.visible_state(meta)) },
      { 'lease_expires_ms', expiry and int(Clock.ms(expiry)) or 'null' },
      { 'depends', Json.array(redis.call('SMEMBERS', K.deps(jid))) },
      { 'dependents', Json.array(redis.call('SMEMBERS', K.dependents(jid))) },
    })
  else
    out[i] = 'null'
  end
end
return '[' .. table.concat(out, ',') .. ']'
