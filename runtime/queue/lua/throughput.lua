-- throughput.lua: jobs completed and failed for good in each of the last minutes,
-- all queues together, as the reports counted them (lib/stats.lua keeps them for
-- throughput_hours). Reads only.
--
-- KEYS[1]  the namespace root
-- ARGV     minutes (1 .. throughput_hours x 60): how many, the current one included
-- Reply    {"now_ms": n, "from_ms": when the oldest minute began (ms),
--          "completed": [n, ...], "failed": [n, ...]}: one entry per minute,
--          oldest first; the last is the current minute, still counting
-- Errors   BAD_ARG

local minutes = Check.int('minutes', ARGV[1], 1, LIMITS.throughput_hours * 60)
local now_us = Clock.now_us()
local last = math.floor(now_us / 60000000)
local first = last - minutes + 1
local completed, failed = {}, {}
for i = 1, minutes do
  completed[i], failed[i] = '0', '0'
end
for hour = math.floor(first / 60), math.floor(last / 60) do
  local fields = redis.call('HGETALL', K.throughput(int(hour)))
  for i = 1, #fields, 2 do
    local kind, minute = string.match(fields[i], '^([cf]):(%d%d?)$')
    local n = tonumber(fields[i + 1])
    local at = minute and n and hour * 60 + tonumber(minute) - first + 1
    if at and at >= 1 and at <= minutes and n == math.floor(n) then
      if kind == 'c' then
        completed[at] = int(n)
      else
        failed[at] = int(n)
      end
    end
  end
end
return '{"now_ms":' .. int(Clock.ms(now_us)) .. ',"from_ms":' .. int(first * 60000)
  .. ',"completed":[' .. table.concat(completed, ',') .. '],"failed":['
  .. table.concat(failed, ',') .. ']}'
