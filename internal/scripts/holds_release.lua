-- holds_release.lua: release one handle of a shared hold (a reentrant
-- owner's or a reader's); when it was the last live one, free the lock key
-- or hand it to the first live waiter. Also: take a waiter out of the
-- queue, passing on whatever reached it too late. Uses lualib/queue.lua and
-- lualib/holds.lua (prepended).
--
-- KEYS[1]  the lock key: holds ARGV[5] while the hold lasts
-- KEYS[2]  the wait queue (lualib/queue.lua)
-- KEYS[3]  the hold set (lualib/holds.lua)
-- KEYS[4]  the waiters' leases (hash, lualib/queue.lua)
-- KEYS[5]  the tombstones (sorted set, lualib/queue.lua)
-- ARGV[1]  the handle's (or leaving waiter's) token
-- ARGV[2]  the key's wake-up channel ('released' when freed, nobody queued)
-- ARGV[3]  the pickup time in ms of a hand-off
-- ARGV[4]  '0': release a handle; '1': a waiter leaves the queue
-- ARGV[5]  the hold's group: the reentrant owner, or the shared marker
--
-- A leaving waiter may have been handed the key exclusively (it holds the
-- waiter's token: passed on to the next waiter) or added to the hold set
-- (a reader batch: its handle is released like any other).
--
-- A release leaves a tombstone for the token (q_released), so a second
-- run of it (re-sent by the Redis client after a lost reply) returns 1.
-- A release that finds neither its handle nor its tombstone but the mark
-- an operator's steal (release.lua's 'force') left for the handle
-- ('^' .. token, q_mark_stolen) returns -3.
--
-- Returns  1  released (and, if it was the last handle, freed or handed off)
--          0  the key is gone, or the handle's lease had already ended
--             (leaving: nothing of ours was there)
--         -1  the lock key holds something else: left untouched
--         -2  the lock key exists but is not a string, or the queue or
--             the hold set has another type: nothing was written
--         -3  (a handle's release) an operator's steal released the hold
--             while the handle was in it: a loss, also when the reply
--             comes after the handle's deadline
local token, group = ARGV[1], ARGV[5]
local Q = q_keys(KEYS[2], KEYS[4], KEYS[5])

-- gone answers a handle's release that found its handle gone: 1 if this
-- release ran already (its tombstone), -3 if a steal took the handle (its
-- mark), else none (0, or -1 if the key holds something else): one read
-- of T for both, on this rare path only. A T that is not a sorted set
-- holds neither.
local function gone(none)
  local r = redis.pcall('ZMSCORE', Q.t, token, '^' .. token)
  if is_err(r) then
    return none
  elseif r[1] then
    return 1 -- this release already ran (its reply was lost): not a loss
  elseif r[2] then
    return -3 -- taken by an operator (ForceRelease)
  end
  return none
end
local v = redis.pcall('GET', KEYS[1])
if is_err(v) or not h_count(KEYS[3]) or not q_ok(Q) then
  return -2
end
if ARGV[4] == '1' then
  q_leave(Q, token)
  if v == token then
    q_handoff(KEYS[1], Q, ARGV[3], ARGV[2])
    return 1
  end
  if v ~= group then
    return 0
  end
elseif v ~= group then
  return gone(v and -1 or 0)
end
local now = now_ms(Q)
local live = h_live(KEYS[3], token, now)
redis.call('ZREM', KEYS[3], token)
if not live then
  if ARGV[4] ~= '1' then
    return gone(0)
  end
  return 0
end
h_prune(KEYS[3], now)
if not h_settle(KEYS[1], KEYS[3]) then
  q_handoff(KEYS[1], Q, ARGV[3], ARGV[2])
end
if ARGV[4] ~= '1' then
  q_released(Q, token)
end
return 1
