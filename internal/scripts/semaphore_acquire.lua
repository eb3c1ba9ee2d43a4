-- semaphore_acquire.lua: take n permits of a semaphore, or confirm permits
-- handed to us. Uses internal/lualib (prepended).
--
-- KEYS[1]  S: the holders (sorted set, see lualib/semaphore.lua); it is the
--          semaphore's own key, so a plain lock on it fails (WRONGTYPE)
-- KEYS[2]  P: permits per holder (hash)
-- KEYS[3]  L: the limit set by SetLimit, if any
-- KEYS[4]  the fence counter
-- KEYS[5]  Q: the wait queue (lualib/queue.lua)
-- KEYS[6]  the waiters' leases (hash, lualib/queue.lua)
-- KEYS[7]  the tombstones (sorted set, lualib/queue.lua)
-- ARGV[1]  the caller's token (also its queue token)
-- ARGV[2]  the TTL of the caller's permits in milliseconds
-- ARGV[3]  the fence counter TTL in milliseconds
-- ARGV[4]  mode: try, q1, q or barge (as in acquire.lua)
-- ARGV[5]  (q1, q) the waiter's queue payload: its channel, '{', ARGV[7]
-- ARGV[6]  (q1, q) the waiter's queue lease in milliseconds
-- ARGV[7]  n, the permits asked for (at least 1)
-- ARGV[8]  the caller's limit, used if L is absent
-- ARGV[9]  the pickup time in ms of permits handed to a queued waiter
--
-- Expired holders are dropped first (a crashed holder's permits come back
-- after its TTL). Queued waiters are served first, in order (see sem_pump):
-- a newcomer takes permits only if no live waiter is left queued (no
-- barging), except in 'barge' mode. Every path leaves each key it wrote
-- with a TTL: S and P expire with the last holder's lease (sem_settle),
-- also when the caller itself is not granted.
--
-- Returns {1, fence}  acquired
--         {0, wait}   not acquired; wait = ms until the earliest holder's
--                     lease ends (-2: none holds any, waiters are ahead)
--         {-2, 0}     KEYS[1] is not a sorted set (not a semaphore), or another
--                     key has a type or value not ours: nothing was written
--         {-3, limit} n is above the limit: it can never be granted
local token, ttl, mode, n = ARGV[1], tonumber(ARGV[2]), ARGV[4], tonumber(ARGV[7])
local S, P, L, F = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local Q = q_keys(KEYS[5], KEYS[6], KEYS[7])
local dead, c = q_dead_fence(Q, token, F)
if dead then
  return {0, -2} -- a withdrawn token (lualib/queue.lua): never granted again
end

local mine = redis.pcall('ZSCORE', S, token)
local limit = sem_limit(L, ARGV[8])
if dead == nil or is_err(mine) or not limit or not c or not sem_ok(P) or not q_ok(Q) then
  return {-2, 0}
end
local now = now_ms(Q)
local used = sem_prune(S, P, now)

local function grant()
  redis.call('ZADD', S, now + ttl, token)
  if mode == 'q' or mine then
    q_granted(Q, token)
  end
  sem_settle(S, P)
  return {1, fence_draw(F, c, ARGV[3], false, Q)}
end

if mine and tonumber(mine) > now then
  return grant() -- permits handed to us, or a retried acquire
end
if n > limit then
  q_leave(Q, token)
  return {-3, limit}
end
if mode == 'q' then
  q_join(Q, token, ARGV[5], ARGV[6], false) -- back at the head if a hand-off lapsed
end
local free = limit - used
if mode ~= 'barge' then
  local before = free
  free = sem_pump(S, P, Q, free, limit, now, ARGV[9], token, n)
  if redis.call('ZSCORE', S, token) then
    return grant() -- we were at the head of the queue, and it fit
  end
  if free < before then
    sem_settle(S, P) -- waiters were handed permits: S and P expire with them
  end
end
if n <= free and (mode == 'barge' or redis.call('LLEN', Q.q) == 0) then
  sem_take(S, P, token, n, now + ttl)
  return grant()
end
if mode == 'q1' then
  q_join(Q, token, ARGV[5], ARGV[6], true)
end
local first = redis.call('ZRANGE', S, 0, 0, 'WITHSCORES')
if #first == 0 then
  return {0, -2}
end
return {0, math.max(tonumber(first[2]) - now, 1)}
