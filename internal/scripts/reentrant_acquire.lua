-- reentrant_acquire.lua: take a reentrant lock for an owner, or join the
-- owner's current hold (no queueing: the owner already holds it), or
-- confirm a hand-off. Uses lualib/fence.lua, lualib/queue.lua and
-- lualib/holds.lua (prepended).
--
-- KEYS[1]  the lock key: holds the hold's value (ARGV[7]) as a plain
--          string, expiring with the owner's last handle, so SET NX clients
--          and dlock's other locks on the key are excluded by it
-- KEYS[2]  the fence counter
-- KEYS[3]  the wait queue (lualib/queue.lua)
-- KEYS[4]  the hold set (lualib/holds.lua): one member per handle; the hold
--          count is its size
-- KEYS[5]  the waiters' leases (hash, lualib/queue.lua)
-- KEYS[6]  the tombstones (sorted set, lualib/queue.lua)
-- ARGV[1]  the handle's token (also its queue token)
-- ARGV[2]  the handle's TTL in milliseconds
-- ARGV[3]  the fence counter TTL in milliseconds
-- ARGV[4]  mode: try, q1, q or barge (as in acquire.lua)
-- ARGV[5]  (q1, q) the waiter's queue payload: its hand-off channel
-- ARGV[6]  (q1, q) the waiter's queue lease in milliseconds
-- ARGV[7]  the hold's value: 'dlock:reentrant:' and the owner id, a string
--          no other kind of lock stores (tokens have no ':', legacy values
--          are digits, a read phase holds 'dlock:shared')
--
-- A new hold draws a fencing token; every handle of that hold gets the same
-- one (the fence counter does not move while one owner holds the key).
--
-- Returns {1, fence}  acquired: a new hold, or one more handle of the
--                     owner's live hold
--         {0, pttl}   held by another owner: pttl as in acquire.lua
--         {-2, 0}     a key exists with another type: nothing was written
local token, ttl, mode, owner = ARGV[1], tonumber(ARGV[2]), ARGV[4], ARGV[7]
local K, F, H = KEYS[1], KEYS[2], KEYS[4]
local Q = q_keys(KEYS[3], KEYS[5], KEYS[6])
local dead, c = q_dead_fence(Q, token, F)
if dead then
  return {0, -2} -- a withdrawn token (lualib/queue.lua): never granted again
end

local v = redis.pcall('GET', K)
if is_err(v) then
  return {-2, 0}
end
local handles = h_count(H)
if dead == nil or not c or not handles or not q_ok(Q) then
  return {-2, 0}
end
local now = now_ms(Q)

local function hold(new)
  local f
  if new then
    redis.call('SET', K, owner)
    if handles > 0 then
      redis.call('DEL', H) -- handles of an earlier hold that ended
    end
    f = fence_draw(F, c, ARGV[3], false, Q)
  elseif c > 0 then
    f = c
    keep_for(F, ARGV[3])
  else
    f = fence_draw(F, c, ARGV[3], false, Q)
  end
  redis.call('ZADD', H, now + ttl, token)
  redis.call('LREM', Q.q, 0, token)
  if mode == 'q' or v == token then
    q_granted(Q, token)
  end
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
  handles = redis.call('ZCARD', H)
  return hold(handles == 0)
end
if mode == 'q' then
  q_join(Q, token, ARGV[5], ARGV[6], false) -- Q's type was checked above
end
if not v then
  local may = q_may_take(Q, token, mode)
  if may == nil then
    return {-2, 0}
  end
  if may then
    return hold(true)
  end
end
if mode == 'q1' then
  q_join(Q, token, ARGV[5], ARGV[6], true)
end
if not v then
  return {0, -2}
end
return {0, redis.call('PTTL', K)}
