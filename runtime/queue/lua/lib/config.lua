-- config.lua: the deployment's shared settings (hash K.config), per queue first.
--
-- Config.get('heartbeat', 'emails') reads "emails-heartbeat", then "heartbeat",
-- then the default from runtime/config.py (rendered into DEFAULTS). The hash is
-- read once per script call.

local Config = {}
local config_values
per_call(function()
  config_values = nil
end)

function Config.get(name, queue)
  if not config_values then
    config_values = {}
    local flat = redis.call('HGETALL', K.config)
    for i = 1, #flat, 2 do
      config_values[flat[i]] = tonumber(flat[i + 1])
    end
  end
  return (queue and config_values[queue .. '-' .. name]) or config_values[name] or DEFAULTS[name]
end
