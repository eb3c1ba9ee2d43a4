-- reentrant_acquire.lua: take a reentrant lock for an owner, or join the
-- owner's current hold (no queueing: the owner already holds it), or
-- confirm a hand-off. Uses lib/fence.lua, lib/queue.lua, lib/holds.lua.
--
-- KEYS[1]  the lock key: holds the owner id (ARGV[7]) as a plain string,
--          expiring with the owner's last handle, so SET NX clients and
--          dlock's other locks on the key are excluded by it
-- KEYS[2]  the fence counter
-- KEYS[3]  the wait queue (lib/queue.lua)
-- KEYS[4]  the hold set (lib/holds.lua): one member per handle; the hold
--          count is its size
-- ARGV[1]  the handle's token (also its queue token)
-- ARGV[2]  the handle's TTL in milliseconds
-- ARGV[3]  the fence counter TTL in milliseconds
-- ARGV[4]  mode: try, q1, q or barge (as in acquire.lua)
-- ARGV[5]  (q1, q) the waiter's queue payload: its hand-off channel
-- ARGV[6]  (q1, q) the waiter's queue lease in milliseconds
-- ARGV[7]  the owner id
--
-- A new hold draws a fencing token; every handle of that hold gets the same
-- one (the fence counter does not move while one owner holds the key).
--
-- Returns {1, fence}  acquired: a new hold, or one more handle of the
--                     owner's live hold
--         {0, pttl}   held by another owner: pttl as in acquire.lua
--         {-2, 0}     KEYS[1] exists but is not a string
local token, ttl, mode, owner = ARGV[1], tonumber(ARGV[2]), ARGV[4], ARGV[7]
local K, F, Q, H = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

local v = redis.pcall('GET', K)
if type(v) == 'table' and v.err then
  return {-2, 0}
end
local now = now_ms()

local function hold(new)
  local f
  if new then
    redis.call('SET', K, owner)
    redis.call('DEL', H)
    f = fence_next(F, ARGV[3])
  else
    f = tonumber(redis.call('GET', F))
    if f then
      keep_for(F, ARGV[3])
    else
      f = fence_next(F, ARGV[3])
    end
  end
  redis.call('ZADD', H, now + ttl, token)
  redis.call('LREM', Q, 0, token)
  h_settle(K, H)
  return {1, f}
end

if v == token then
  -- An exclusive hand-off to our queue token: start the owner's hold.
  return hold(true)
end
if v == owner then
  -- Our owner holds it: join (a key naming us with no live handle left is
  -- a hold that just ended: start a new one).
  h_prune(H, now)
  return hold(redis.call('EXISTS', H) == 0)
end
if not v and (mode == 'barge' or not q_ahead(Q, token)) then
  return hold(true)
end
if mode == 'q1' or mode == 'q' then
  q_join(Q, token, ARGV[5], ARGV[6], mode == 'q1')
end
if not v then
  return {0, -2}
end
return {0, redis.call('PTTL', K)}
