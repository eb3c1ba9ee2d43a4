-- extend.lua: push out the TTL of a lock we own (compare-and-expire), on
-- one key or on every key of a multi-key lock (all-or-nothing). An expiry
-- is never moved earlier (PEXPIRE GT, see ext_apply): a key with more than
-- ARGV[2] ms left keeps its expiry, and a late or repeated call cannot
-- shorten what a later call confirmed.
--
-- KEYS     pairs: KEYS[2i-1] a lock key, KEYS[2i] its fence counter, whose
--          TTL is pushed out too, so the counter (which `dlock list` finds
--          locks by) lives as long as the lock. A pair's keys share a slot;
--          a multi-key lock sends one call per slot.
-- ARGV[1]  the caller's token
-- ARGV[2]  the TTL in milliseconds: each key expires ARGV[2] ms from now
--          at the earliest
-- ARGV[3]  the fence counters' TTL in milliseconds (longer than ARGV[2]),
--          or 0: leave it
--
-- Returns  1  extended (every key held our token; each now has at least
--             ARGV[2] ms left)
--          0  a key is gone (expired or deleted): the lock is lost
--         -1  a key holds another owner's token: the lock is lost
--         -2  a key exists but is not a string
-- Nothing is extended unless every key holds our token. Uses
-- lualib/owner.lua (prepended).
for i = 1, #KEYS, 2 do
  local code = owner_check(KEYS[i], ARGV[1])
  if code ~= 1 then
    return code
  end
end
for i = 1, #KEYS, 2 do
  ext_apply(KEYS[i], KEYS[i + 1], ARGV[2], ARGV[3])
end
return 1
