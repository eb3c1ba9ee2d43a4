-- release.lua: release a lock we own and hand it to the first live waiter;
-- or take a waiter out of the queue (it gave up), passing on a hand-off
-- that reached it too late; or (an operator's steal) release whoever holds
-- it. Uses lualib/queue.lua (prepended).
--
-- KEYS[1]  the lock key
-- KEYS[2]  the wait queue (see lualib/queue.lua)
-- KEYS[3]  the waiters' leases (hash, lualib/queue.lua)
-- KEYS[4]  the tombstones (sorted set, lualib/queue.lua)
-- KEYS[5]  ('force' only, optional) the hold set of a shared hold
--          (lualib/holds.lua) the key's value may name: each of its
--          handles' tokens is marked stolen too
-- ARGV[1]  the caller's token; for 'force', the value the caller read
--          ('': whatever the key holds)
-- ARGV[2]  the key's wake-up channel: 'released' is published on it when
--          the key is freed with nobody queued (barging waiters listen).
--          Every PUBLISH is pcall_publish's: one the ACL refuses is skipped
--          and cannot end the script after its writes.
-- ARGV[3]  the pickup time in ms: a hand-off not confirmed by then lapses
-- ARGV[4]  '0': the caller holds the lock; '1': the caller is a waiter
--          leaving the queue; 'force': release the key if it still holds
--          ARGV[1] (an operator's steal; a steal that lands after the key
--          changed hands leaves the new holder alone: -1). A steal leaves
--          the mark '^' .. the value it released in KEYS[4] for as long as
--          a tombstone, and '^' .. token for each handle in KEYS[5]
--          (q_mark_stolen; '^' is never in a token)
--
-- The hand-off (q_handoff): the key is set to the next live waiter's token
-- with a PX of ARGV[3], the waiter's lease is marked handed (see
-- lualib/queue.lua's pickup state), and the waiter is told on its own
-- channel (q_notify: the SHA1 of its token, never the token). Waiters whose lease expired are skipped. A shared or reentrant
-- waiter converts such a hand-off into its own kind of hold when it
-- confirms it.
--
-- A holder's release (q_release) leaves a tombstone for the token
-- (q_released): a second run of the same release (the Redis client re-sends a command whose reply a
-- broken connection lost) finds it and returns 1 again, not a loss. One
-- that finds the mark of a steal of its token instead answers -3.
--
-- Returns  1  released (freed, or handed off)
--          0  the key is gone, or (leaving) was not ours: nothing released
--         -1  the key holds another owner's token: left untouched
--         -2  the key exists but is not a string, or a queue key has
--             another type: nothing was written
--         -3  (a holder's release) an operator's steal released the key
--             while it held the caller's token: a loss, also when the
--             reply comes after the holder's deadline
local token = ARGV[1]
local Q = q_keys(KEYS[2], KEYS[3], KEYS[4])
if ARGV[4] == '0' then
  return q_release(KEYS[1], Q, token, ARGV[2], ARGV[3])
end
local v = redis.pcall('GET', KEYS[1])
if is_err(v) then
  return -2
end
if ARGV[4] == '1' then
  if not q_leave(Q, token) then
    return -2
  end
  if v ~= token then
    return 0
  end
elseif v ~= token and (ARGV[4] ~= 'force' or token ~= '') then
  return v and -1 or 0
elseif not v then
  return 0 -- force, and nothing held
end
if not q_handoff(KEYS[1], Q, ARGV[3], ARGV[2]) then
  return -2
end
if ARGV[4] == 'force' then
  q_mark_stolen(Q, v)
  if KEYS[5] then
    local hs = redis.pcall('ZRANGE', KEYS[5], 0, -1)
    if not is_err(hs) then
      for _, h in ipairs(hs) do
        q_mark_stolen(Q, h)
      end
    end
  end
end
return 1
