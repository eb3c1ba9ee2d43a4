-- acquire.lua: take a lock (SET NX PX semantics) with FIFO queueing, or
-- confirm a lock handed to us, and draw the grant's fencing token.
-- Uses lib/fence.lua and lib/queue.lua (prepended).
--
-- KEYS[1]  the lock key: holds the owner's token, with a PX TTL
-- KEYS[2]  the fence counter (same Cluster slot as KEYS[1])
-- KEYS[3]  the wait queue (see lib/queue.lua): waiter tokens, oldest first,
--          each live waiter with a lease key KEYS[3]..':'..token
-- ARGV[1]  the caller's token
-- ARGV[2]  the lock TTL in milliseconds
-- ARGV[3]  the fence counter TTL in milliseconds (longer than ARGV[2])
-- ARGV[4]  mode: 'try'  one attempt; a free key is taken only if no live
--                       waiter is queued (no barging)
--                'q1'   a waiter's first attempt: like 'try', and if not
--                       granted, join the queue's tail
--                'q'    a queued waiter's retry: refresh its lease (rejoin
--                       the tail if it had lapsed); take a free key if it
--                       is at the head of the live queue
--                'barge' ignore the queue: take the key whenever it is free
-- ARGV[5]  (q1, q) the waiter's queue payload: its hand-off channel
-- ARGV[6]  (q1, q) the waiter's lease in milliseconds
--
-- Returns {1, fence}  acquired (or the key already held our token: a hand-off
--                     being confirmed, or a retried acquire). The key's TTL is
--                     set to ARGV[2]. fence = the counter's next value (see
--                     lib/fence.lua).
--         {0, pttl}   not acquired; pttl = the holder's remaining TTL in ms
--                     (-1: no TTL; -2: the key is free but waiters are ahead)
--         {-2, 0}     KEYS[1] exists but is not a string (not a lock)
local token, mode = ARGV[1], ARGV[4]

local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' and v.err then
  return {-2, 0}
end
if v == token then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, fence_next(KEYS[2], ARGV[3])}
end
if not v and (mode == 'barge' or not q_ahead(KEYS[3], token)) then
  redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
  return {1, fence_next(KEYS[2], ARGV[3])}
end
if mode == 'q1' or mode == 'q' then
  q_join(KEYS[3], token, ARGV[5], ARGV[6], mode == 'q1')
end
if not v then
  return {0, -2}
end
return {0, redis.call('PTTL', KEYS[1])}
