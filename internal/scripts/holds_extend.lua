-- holds_extend.lua: renew one handle of a shared hold: a reentrant owner's
-- handle or a reader's. Uses lualib/fence.lua, lualib/owner.lua and
-- lualib/holds.lua (prepended).
--
-- KEYS[1]  the lock key: holds ARGV[4] while the hold lasts
-- KEYS[2]  the hold set (lualib/holds.lua): handle token -> lease end (ms)
-- KEYS[3]  the fence counter, kept at least ARGV[3] ms more
-- ARGV[1]  the handle's token
-- ARGV[2]  the new TTL of the handle in milliseconds
-- ARGV[3]  the fence counter's TTL in milliseconds
-- ARGV[4]  the hold's group: the reentrant owner, or the shared marker
--
-- The handle's lease end becomes now + ARGV[2], unless it was later
-- already (ZADD GT: a lease end is never moved earlier, so a late or
-- repeated renewal cannot cut short what a later, longer one confirmed);
-- the lock key and the hold set then expire with the last lease (they may
-- get shorter if a longer handle left). Other live handles' leases are
-- untouched; ended ones are dropped.
--
-- Returns  1  renewed
--          0  the lock key is gone, or the handle's lease had ended (its
--             share of the hold expired): the handle is lost
--         -1  the lock key holds something else: another owner has it
--         -2  the lock key exists but is not a string, or the hold set
--             is not a sorted set: nothing was written
local code = owner_check(KEYS[1], ARGV[4])
if code == -2 or not h_count(KEYS[2]) then
  return -2
end
if code ~= 1 then
  return code
end
local now = now_ms()
if not h_live(KEYS[2], ARGV[1], now) then
  return 0
end
h_prune(KEYS[2], now) -- the set shows the live handles only
redis.call('ZADD', KEYS[2], 'GT', now + tonumber(ARGV[2]), ARGV[1])
h_settle(KEYS[1], KEYS[2])
keep_for(KEYS[3], ARGV[3])
return 1
