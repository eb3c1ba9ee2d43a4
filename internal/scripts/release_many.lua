-- release_many.lua: Close's bulk release: release.lua's holder release
-- (ARGV[4] '0') for many single-key locks in one call, each on its own.
-- Uses lualib/queue.lua (prepended).
--
-- KEYS     quadruples: KEYS[4i-3] lock i's key, KEYS[4i-2] its wait queue,
--          KEYS[4i-1] its waiters' leases, KEYS[4i] its tombstones. On a
--          Cluster every key of one call is in one slot (the engine groups
--          locks by slot; on a Ring, by shard).
-- ARGV     triples: ARGV[3i-2] lock i's token, ARGV[3i-1] its key's
--          wake-up channel, ARGV[3i] the pickup time in milliseconds
--
-- Each lock is handed to its first live waiter or freed, and leaves its
-- release tombstone, exactly as release.lua does (see q_release), so a
-- re-sent call answers 1 for every lock it released the first time.
--
-- Returns  an array: element i is lock i's reply, as release.lua's:
--           1  released (freed, or handed off)
--           0  the key is gone: nothing released
--          -1  the key holds another owner's token: left untouched
--          -2  the key is not a string, or the queue not a list
--          -3  an operator's steal released the key while it held the
--              token (q_release)
local out = {}
for i = 1, #KEYS / 4 do
  local Q = q_keys(KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i])
  out[i] = q_release(KEYS[4 * i - 3], Q, ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i])
end
return out
