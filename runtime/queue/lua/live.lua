-- live.lua: the lease holder sends what its running jobs printed (many in one
-- step), for `runtime logs --follow` and the dashboard (docs/operating.md,
-- "runtime logs"). Sent with a master's exchange, batched: never a call per line.
--
-- KEYS[1]  the namespace root
-- ARGV     worker, then per job: jid, token, text, dropped
--          text: the lines printed since the last batch (its tail kept, at most
--            live_max_bytes); dropped: how many lines the master did not send
--            (over its per-job budget: runtime/master/output.py), an integer >= 0
-- Writes   one entry per job on K.live(jid) (a stream): {o text, d dropped, a the
--          attempt}, the stream kept to about live_entries entries and expiring
--          live_ttl_s after its last entry. Nothing else of the job changes.
-- Reply    JSON list, one entry per job: {"jid", "ok": true, "state"} or
--          {"jid", "error": code, "message"}
-- Errors   per job: LEASE_LOST (not running under this worker and token),
--          NO_SUCH_JOB, BAD_ARG; BAD_ARG for malformed ARGV

local worker = Check.token('worker', ARGV[1], LIMITS.worker_max)
if #ARGV % 4 ~= 1 then
  E.bad('live takes a worker, then groups of jid, token, text and dropped')
end
local now_us = Clock.now_us()

local function live(jid, token, text, dropped_arg)
  local dropped = Check.int('dropped', dropped_arg, 0, 1e12)
  local meta = Job.must(jid)
  if not (meta.s == RUNNING and meta.w == worker and meta.l == token
      and Lease.live(jid, meta, now_us)) then
    E.raise('LEASE_LOST', jid .. ' is not running under worker ' .. worker .. ' with that token')
  end
  local key = K.live(jid)
  redis.call('XADD', key, 'MAXLEN', '~', int(LIMITS.live_entries), '*',
    'o', Text.tail(text, LIMITS.live_max_bytes), 'd', int(dropped), 'a', int(meta.a or 1))
  redis.call('EXPIRE', key, int(LIMITS.live_ttl_s))
  return meta.s
end

local out = {}
for i = 2, #ARGV, 4 do
  out[#out + 1] = E.item(ARGV[i], E.attempt(live, ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]))
end
return '[' .. table.concat(out, ',') .. ']'
