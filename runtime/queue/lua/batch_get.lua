-- batch_get.lua: a batch's counts and callbacks (lib/batch.lua).
--
-- KEYS[1]  the namespace root
-- ARGV     bid, failed_max (0..get_max: failed jids listed)
-- Reply    nil when there is no such batch (never, or expired), else JSON:
--          {"bid", "description", "total", "pending", "completed", "failed",
--           "cancelled" (of failed), "sealed" (bool), "created_ms", "sealed_ms",
--           "settled_ms" (null while open), "on_success", "on_complete" (bool: given),
--           "success_jid", "complete_jid" (null until put), "success_error",
--           "complete_error" (why a callback could not be put, else null),
--           "failed_jids" (at most failed_max, sorted), "ttl_ms" (-1: kept)}
-- Read-only (no-writes).
-- Errors   BAD_ARG

local bid = Check.token('bid', ARGV[1], LIMITS.jid_max)
local failed_max = Check.int('failed_max', ARGV[2], 0, LIMITS.get_max)
return Batch.view(bid, failed_max)
