-- acquire.lua: take a lock (SET NX PX semantics) with FIFO queueing, or
-- confirm a lock handed to us, and draw the grant's fencing token.
-- Uses lualib/fence.lua and lualib/queue.lua (prepended).
--
-- KEYS[1]  the lock key: holds the owner's token, with a PX TTL
-- KEYS[2]  the fence counter (same Cluster slot as KEYS[1])
-- KEYS[3]  the wait queue (see lualib/queue.lua): waiter tokens, oldest first
-- KEYS[4]  the waiters' leases (hash, lualib/queue.lua)
-- KEYS[5]  the tombstones (sorted set, lualib/queue.lua)
-- ARGV[1]  the caller's token
-- ARGV[2]  the lock TTL in milliseconds
-- ARGV[3]  the fence counter TTL in milliseconds (longer than ARGV[2])
-- ARGV[4]  mode: 'try'  one attempt; a free key is taken only if no live
--                       waiter is queued (no barging)
--                'q1'   a waiter's first attempt: like 'try', and if not
--                       granted, join the queue's tail
--                'q'    a queued waiter's retry: refresh its lease (back
--                       at the head if a hand-off to it lapsed, at the tail
--                       if its lease had); take a free key if it is at the
--                       head of the live queue
--                'barge' ignore the queue: take the key whenever it is free
-- ARGV[5]  (q1, q) the waiter's queue payload: its hand-off channel
-- ARGV[6]  (q1, q) the waiter's lease in milliseconds
--
-- Returns {1, fence}  acquired (or the key already held our token: a hand-off
--                     being confirmed, or a retried acquire). The key's TTL is
--                     set to ARGV[2]. fence = max(counter + 1, TIME in µs)
--                     (see lualib/fence.lua). A waiter's lease is deleted.
--         {0, pttl}   not acquired; pttl = the holder's remaining TTL in ms
--                     (-1: no TTL; -2: the key is free but waiters are ahead)
--         {-2, 0}     a key exists with another type (not a lock, a
--                     counter, a queue...): nothing was written
local token, mode = ARGV[1], ARGV[4]
local K, F = KEYS[1], KEYS[2]
local Q = q_keys(KEYS[3], KEYS[4], KEYS[5])
local v, dead, c
if mode == 'try' or mode == 'barge' then
  -- The common case: nobody queued (or barging), so a free key is taken
  -- by SET NX, whose GET also reads what a held key holds, and the fence
  -- is drawn by a SET that reads the counter it replaces (fence_swap).
  dead = q_dead(Q, token)
  if dead then
    return {0, -2} -- a withdrawn token (lualib/queue.lua): never granted again
  end
  local free = dead == false and (mode == 'barge' or q_empty(Q))
  if free == nil or dead == nil then
    return {-2, 0}
  end
  if free then
    v = redis.pcall('SET', K, token, 'NX', 'PX', ARGV[2], 'GET')
    if is_err(v) then
      return {-2, 0}
    end
    if not v then
      local n = fence_swap(F, ARGV[3], Q)
      if not n then
        redis.call('DEL', K) -- the counter is not ours: no grant
        return {-2, 0}
      end
      return {1, n}
    end
  end
  c = fence_read(F)
elseif mode == 'q' then
  -- A queued waiter's retry, most often the confirmation of a hand-off:
  -- the key and the counter in one read. A key holding our token makes
  -- the tombstone moot (no script leaves a token's tombstone while the key
  -- holds that token: a leave or a release hands the key on or deletes it
  -- in the same run), so the tombstone is read only when it does not.
  local r = redis.call('MGET', K, F)
  if r[1] then
    v = r[1] -- else read again below: MGET answers nil for another type
  end
  dead = v ~= token and q_dead(Q, token)
  c = fence_mget(F, r[2])
else
  -- A waiter's first attempt (q1) finds the key held, most often: the
  -- key is read with the counter (else a GET below).
  dead, c, v = q_dead_fence(Q, token, F, K)
end
if dead then
  return {0, -2} -- a withdrawn token (lualib/queue.lua): never granted again
end
if not c or dead == nil then
  return {-2, 0}
end
if v == nil then
  v = redis.pcall('GET', K)
  if is_err(v) then
    return {-2, 0}
  end
end
if v == token then
  redis.call('PEXPIRE', K, ARGV[2])
  q_granted(Q, token)
  return {1, fence_draw(F, c, ARGV[3], true, Q)}
end
if mode == 'q' then
  if not q_ok(Q) then
    return {-2, 0}
  end
  q_join(Q, token, ARGV[5], ARGV[6], false)
end
if not v then
  local may = q_may_take(Q, token, mode)
  if may == nil then
    return {-2, 0}
  end
  if may then
    redis.call('SET', K, token, 'PX', ARGV[2])
    if mode == 'q' then
      q_granted(Q, token)
    end
    return {1, fence_draw(F, c, ARGV[3], true, Q)}
  end
end
if mode == 'q1' and not q_join(Q, token, ARGV[5], ARGV[6], true) then
  return {-2, 0}
end
if not v then
  return {0, -2}
end
return {0, redis.call('PTTL', K)}
