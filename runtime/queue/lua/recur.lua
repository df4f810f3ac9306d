-- recur.lua: creates or replaces a recurrence (see lib/recur.lua).
--
-- KEYS[1]  the namespace root
-- ARGV     definition, data, tick_1, tick_2, ...
--          definition: JSON {id, queue, spec (job template: klass, priority,
--          retries, tags, backoff, timeout_s, domain), every (s) | cron (text),
--          tz, policy (skip | once | all), grace (s), first_ms (every only;
--          default: now + every)}
--          data: the jobs' data, a JSON object as text
--          ticks: cron only, the upcoming ticks (ms, ascending), from croniter
-- Reply    the stored definition, JSON
-- Errors   BAD_ARG (nothing written)

local now_us = Clock.now_us()
local now_ms = Clock.ms(now_us)
local given = Json.decode('definition', ARGV[1] or '')
local data = ARGV[2]
local id = Check.token('id', given.id, LIMITS.recur_id_max)
local queue = Check.queue('queue', given.queue)
if type(given.spec) ~= 'table' then
  E.bad('spec must be a JSON object')
end
local spec = {}
for k, v in pairs(given.spec) do
  if v ~= cjson.null then
    if k == 'jid' or k == 'queue' or k == 'delay_ms' or k == 'at_ms' or k == 'depends'
        or k == 'unique_key' or k == 'batch' then
      E.bad('a recurrence cannot set ' .. k .. ' on its jobs')
    end
    spec[k] = v
  end
end
local probe = {}
for k, v in pairs(spec) do
  probe[k] = v
end
probe.jid, probe.queue = id .. '-0', queue
Create.parse(probe, data, now_ms) -- the template makes valid jobs
local policy = given.policy or 'once'
if policy ~= 'skip' and policy ~= 'once' and policy ~= 'all' then
  E.bad('policy must be skip, once or all, got ' .. tostring(policy))
end
local every, cron = Check.optional(given.every), Check.optional(given.cron)
local def = {
  id = id, q = queue, spec = spec, data = data, policy = policy, count = 0,
  grace = Check.number('grace', given.grace or 60, 0, 86400 * 365, true),
  tz = Check.optional(given.tz) or 'UTC', created = now_ms,
}
local ticks = {}
if (every == nil) == (cron == nil) then
  E.bad('give every or cron, one of them')
elseif every ~= nil then
  def.every = Check.number('every', every, 0.01, 86400 * 3650, true)
  local first = Check.optional(given.first_ms)
  def.next = first and Check.int('first_ms', first, 0, now_ms + LIMITS.delay_max_ms)
      or now_ms + math.floor(def.every * 1000)
else
  if type(cron) ~= 'string' or #cron == 0 or #cron > 200 then
    E.bad('cron must be a cron expression, 1-200 characters')
  end
  def.cron = cron
  for i = 3, #ARGV do
    ticks[#ticks + 1] = Check.int('tick', ARGV[i], 0, now_ms + LIMITS.delay_max_ms)
    if i > 3 and ticks[#ticks] <= ticks[#ticks - 1] then
      E.bad('ticks must be ascending')
    end
  end
  if #ticks == 0 or #ticks > LIMITS.recur_ticks_max then
    E.bad('a cron recurrence needs 1-' .. LIMITS.recur_ticks_max .. ' ticks')
  end
  def.next, def.ticks_to = ticks[1], ticks[#ticks]
end

local old = Recur.load(id)
if old then
  redis.call('ZREM', K.recurring(old.q), id)
  redis.call('DEL', K.recur_ticks(id))
  def.count, def.created, def.last = old.count, old.created, old.last
end
for _, tick in ipairs(ticks) do
  redis.call('ZADD', K.recur_ticks(id), tick, int(tick))
end
Recur.save(def)
redis.call('ZADD', K.queues, 'NX', now_ms, queue)
Place.nudge(queue) -- idle masters learn the new next tick
return cjson.encode(def)
