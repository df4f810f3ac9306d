-- batch_close.lua: seals a batch: no job joins it after, but from its own
-- running jobs (ctx.batch.put), and its callbacks may fire. A batch whose
-- jobs have all ended already fires them in this call (lib/batch.lua).
-- Sealing again changes nothing.
--
-- KEYS[1]  the namespace root
-- ARGV     bid
-- Reply    the batch, as batch_get.lua answers it
-- Errors   NO_SUCH_JOB (no such batch), BAD_ARG

local bid = Check.token('bid', ARGV[1], LIMITS.jid_max)
Batch.close(bid, Clock.now_us())
return Batch.view(bid, 0)
