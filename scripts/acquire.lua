-- acquire.lua: take a lock (SET NX PX semantics) with FIFO queueing, or
-- confirm a lock handed to us, and draw the grant's fencing token.
--
-- KEYS[1]  the lock key: holds the owner's token, with a PX TTL
-- KEYS[2]  the fence counter (same Cluster slot as KEYS[1])
-- KEYS[3]  the wait queue: a list of waiter tokens, oldest first. Each live
--          waiter also has a lease key KEYS[3]..':'..token (same slot: it
--          carries KEYS[3]'s hash tag) holding the pub/sub channel its
--          hand-off is pushed to; it expires unless the waiter refreshes it.
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
-- ARGV[5]  (q1, q) the waiter's hand-off channel
-- ARGV[6]  (q1, q) the waiter's lease in milliseconds
--
-- Returns {1, fence}  acquired (or the key already held our token: a hand-off
--                     being confirmed, or a retried acquire). The key's TTL is
--                     set to ARGV[2]. fence = INCR of the counter; when the
--                     counter is absent it restarts from the server's TIME in
--                     microseconds, above every fence handed out before.
--         {0, pttl}   not acquired; pttl = the holder's remaining TTL in ms
--                     (-1: no TTL; -2: the key is free but waiters are ahead)
--         {-2, 0}     KEYS[1] exists but is not a string (not a lock)
local token, mode = ARGV[1], ARGV[4]

local function grant()
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  local f = redis.call('INCR', KEYS[2])
  if f == 1 then
    local t = redis.call('TIME')
    f = tonumber(t[1]) * 1000000 + tonumber(t[2])
    redis.call('SET', KEYS[2], string.format('%d', f), 'PX', ARGV[3])
  end
  return {1, f}
end

local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' and v.err then
  return {-2, 0}
end
if v == token then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return grant()
end
if not v then
  local ahead = false
  if mode ~= 'barge' then
    -- Drop dead waiters at the head; a live one other than us goes first.
    local head = redis.call('LINDEX', KEYS[3], 0)
    while head do
      if head == token then
        redis.call('LPOP', KEYS[3])
        break
      end
      if redis.call('EXISTS', KEYS[3] .. ':' .. head) == 1 then
        ahead = true
        break
      end
      redis.call('LPOP', KEYS[3])
      head = redis.call('LINDEX', KEYS[3], 0)
    end
  end
  if not ahead then
    redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
    return grant()
  end
end
if mode == 'q1' or mode == 'q' then
  local had = redis.call('SET', KEYS[3] .. ':' .. token, ARGV[5], 'PX', ARGV[6], 'GET')
  if mode == 'q1' or (not had and not redis.call('LPOS', KEYS[3], token)) then
    redis.call('RPUSH', KEYS[3], token)
  end
end
if not v then
  return {0, -2}
end
return {0, redis.call('PTTL', KEYS[1])}
