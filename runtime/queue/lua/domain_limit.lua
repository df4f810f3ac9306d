-- domain_limit.lua: sets or clears a domain's own rate limit, and re-schedules
-- the domain's waiting jobs in every queue at once.
--
-- KEYS[1]  the namespace root
-- ARGV     domain, limit
--          limit: {"rate": starts > 0, "period": seconds > 0, "burst": extra
--          starts >= 0} as JSON, or "" to clear (the default limit applies)
-- The starts the domain still owes are re-priced at the new limit's interval
-- (lib/domains.lua); then each of its lanes (at most release_batch) is
-- throttled until the domain frees under the new limit, or made ready now, and
-- the idle masters of queues whose jobs free sooner are woken.
-- Reply    how many queues were woken (integer)
-- Errors   BAD_ARG

local domain = Check.token('domain', ARGV[1], LIMITS.domain_max)
local limit_json = ARGV[2]
if limit_json == nil then
  E.bad('domain_limit takes a domain and a limit ("" to clear)')
end
if limit_json ~= '' then
  local lim = Json.decode('limit', limit_json)
  local rate = Check.number('rate', lim.rate, 0, 1e9, true)
  local period = Check.number('period', lim.period, 0, 86400 * 3650, true)
  if rate <= 0 or period <= 0 then
    E.bad('rate and period must be above 0')
  end
  local burst = Check.int('burst', Check.optional(lim.burst) or 0, 0, 1e9)
  limit_json = cjson.encode({ rate = rate, period = period, burst = burst })
else
  limit_json = nil
end

local now_us = Clock.now_us()
Domains.set_limit(domain, limit_json, now_us)
local woken = Lanes.rescore_domain(domain, now_us)
for _, queue in ipairs(woken) do
  Place.nudge(queue)
end
return #woken
