-- config.lua: the deployment's shared settings (hash K.config), per queue first.
--
-- Config.get('heartbeat', 'emails') reads "emails-heartbeat", then "heartbeat",
-- then the default from runtime/config.py (rendered into DEFAULTS). The hash is
-- read once per script call.

local Config = {}
local config_values, values_call = {}, nil -- read by call number values_call (CALL)

local function values()
  if values_call ~= CALL then
    config_values = emptied(config_values)
    values_call = CALL
    local flat = redis.call('HGETALL', K.config)
    for i = 1, #flat, 2 do
      config_values[flat[i]] = tonumber(flat[i + 1])
    end
  end
  return config_values
end

function Config.get(name, queue)
  local v = values()
  return (queue and v[queue .. '-' .. name]) or v[name] or DEFAULTS[name]
end

-- The largest value of a per-queue setting over all queues (and the deployment's).
function Config.max(name)
  local most = Config.get(name)
  local suffix = '-' .. name
  for key, value in pairs(values()) do
    if value and value > most and string.sub(key, -#suffix) == suffix then
      most = value
    end
  end
  return most
end
