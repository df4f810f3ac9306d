-- domain_limit.lua: sets or clears a domain's own limits, and re-schedules
-- the domain's waiting jobs in every queue at once.
--
-- KEYS[1]  the namespace root
-- ARGV     domain, limit
--          limit: {"rate": starts > 0, "period": seconds > 0, "burst": extra
--          starts >= 0, "concurrency": most jobs holding a lease at once >= 1}
--          as JSON, rate (with period, burst) and concurrency each optional but
--          not both absent; or "" to clear (the default rate limit applies, no
--          cap). A pause of the domain (domain_pause.lua) stays as it is.
-- The starts the domain still owes are re-priced at the new rate's interval
-- (lib/domains.lua); then each of its lanes (at most release_batch) is
-- throttled until the domain frees under the new limits, or made ready now, and
-- the idle masters of queues whose jobs free sooner are woken. A cap lowered
-- under the jobs running now stops nothing: no new job starts until fewer
-- than the cap hold a lease.
-- Reply    how many queues were woken (integer)
-- Errors   BAD_ARG

local domain = Check.token('domain', ARGV[1], LIMITS.domain_max)
local limit_json = ARGV[2]
if limit_json == nil then
  E.bad('domain_limit takes a domain and a limit ("" to clear)')
end
local rec = {}
if limit_json ~= '' then
  local lim = Json.decode('limit', limit_json)
  local rate, cap = Check.optional(lim.rate), Check.optional(lim.concurrency)
  if rate == nil and cap == nil then
    E.bad('a limit needs a rate or a concurrency')
  end
  if rate ~= nil then
    rate = Check.number('rate', rate, 0, 1e9, true)
    local period = Check.number('period', lim.period, 0, 86400 * 3650, true)
    if rate <= 0 or period <= 0 then
      E.bad('rate and period must be above 0')
    end
    rec.rate, rec.period = rate, period
    rec.burst = Check.int('burst', Check.optional(lim.burst) or 0, 0, 1e9)
  end
  if cap ~= nil then
    rec.concurrency = Check.int('concurrency', cap, 1, LIMITS.concurrency_max)
  end
end

local now_us = Clock.now_us()
rec.paused = Domains.record(domain).paused == true or nil
Domains.write(domain, rec, now_us)
local woken = Lanes.rescore_domain(domain, now_us)
for _, queue in ipairs(woken) do
  Place.nudge(queue)
end
return #woken
