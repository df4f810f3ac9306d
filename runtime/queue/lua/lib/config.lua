-- config.lua: the deployment's shared settings (hash K.config), per queue first.
--
-- Config.get('heartbeat', 'emails') reads "emails-heartbeat", then "heartbeat",
-- then the default from runtime/config.py (rendered into DEFAULTS). Values are
-- memoized for the length of one script call.

local Config = {}
local config_memo = {}

function Config.get(name, queue)
  local memo_key = (queue or '') .. '\0' .. name
  local value = config_memo[memo_key]
  if value ~= nil then
    return value
  end
  if queue then
    value = tonumber(redis.call('HGET', K.config, queue .. '-' .. name))
  end
  if value == nil then
    value = tonumber(redis.call('HGET', K.config, name))
  end
  if value == nil then
    value = DEFAULTS[name]
  end
  config_memo[memo_key] = value
  return value
end
