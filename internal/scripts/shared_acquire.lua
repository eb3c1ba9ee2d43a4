-- shared_acquire.lua: take a read (shared) lock: start a read phase, join
-- the current one, or confirm a hand-off. Writers are exclusive locks on
-- the same key (acquire.lua). Uses lualib/fence.lua, lualib/queue.lua and
-- lualib/holds.lua (prepended).
--
-- KEYS[1]  the lock key: a writer's token, or ARGV[8] during a read phase
--          (expiring with the last reader's lease)
-- KEYS[2]  the fence counter
-- KEYS[3]  the wait queue (lualib/queue.lua), shared by readers and writers
-- KEYS[4]  the readers' hold set (lualib/holds.lua): reader token -> lease end
-- KEYS[5]  the waiters' leases (hash, lualib/queue.lua)
-- KEYS[6]  the tombstones (sorted set, lualib/queue.lua)
-- ARGV[1]  the reader's token (also its queue token)
-- ARGV[2]  the reader's TTL in milliseconds
-- ARGV[3]  the fence counter TTL in milliseconds
-- ARGV[4]  mode: try, q1, q or barge (as in acquire.lua)
-- ARGV[5]  (q1, q) the reader's queue payload: its channel, then '{r'
-- ARGV[6]  (q1, q) the reader's queue lease in milliseconds
-- ARGV[7]  the pickup time in ms of a hand-off to a queued reader
-- ARGV[8]  the shared marker (what the lock key holds in a read phase)
--
-- Writers are not starved: a reader does not start or join a read phase
-- while a live writer is queued before it (anywhere in the queue, for a
-- newcomer). Whenever a reader gets in, the live readers at the head of
-- the queue (up to the first writer) are let in with it (q_serve): each
-- is added to the hold set with a pickup lease (lualib/queue.lua's pickup
-- state: one that confirms too late is back at the head of the queue).
-- Every reader grant draws its own fencing token.
--
-- Returns {1, fence}  acquired
--         {0, pttl}   not acquired: pttl = the lock key's remaining TTL
--                     (-2: free, but a writer is queued ahead)
--         {-2, 0}     a key exists with another type: nothing was written
local token, ttl, mode, marker = ARGV[1], tonumber(ARGV[2]), ARGV[4], ARGV[8]
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
if dead == nil or not c or not h_count(H) or not q_ok(Q) then
  return {-2, 0}
end
local now = now_ms(Q)

-- writer_ahead: is a live waiter that is not a reader queued before us?
local function writer_ahead()
  if mode == 'barge' then
    return false
  end
  local ms = redis.call('LRANGE', Q.q, 0, -1)
  for i0 = 1, #ms, 256 do -- leases read 256 at a time (unpack's limit)
    local j = math.min(i0 + 255, #ms)
    local ls = redis.call('HMGET', Q.w, unpack(ms, i0, j))
    for i = i0, j do
      if ms[i] == token then
        return false
      end
      local p = q_lease(Q, ls[i - i0 + 1])
      if p then
        local _, req = q_parse(p)
        if req ~= 'r' then
          return true
        end
      end
    end
  end
  return false
end

local function grant(start)
  if start then
    redis.call('SET', K, marker)
    redis.call('DEL', H)
  end
  redis.call('ZADD', H, now + ttl, token)
  redis.call('LREM', Q.q, 0, token)
  if mode == 'q' or v == token then
    q_granted(Q, token)
  end
  -- Let in the live readers at the head of the queue, up to a writer.
  q_serve(Q, nil, true, function(m, req)
    if req ~= 'r' then
      return 'wait'
    end
    redis.call('ZADD', H, now + tonumber(ARGV[7]), m)
    return 'hand'
  end)
  h_settle(K, H)
  return {1, fence_draw(F, c, ARGV[3], false, Q)}
end

if v == token then
  -- An exclusive hand-off (a writer's release) to our queue token.
  return grant(true)
end
if v == marker then
  h_prune(H, now)
  if h_live(H, token, now) then
    return grant(false) -- let in with a batch, or a retried acquire
  end
end
if mode == 'q' then
  q_join(Q, token, ARGV[5], ARGV[6], false)
end
if v == marker then
  if redis.call('EXISTS', H) == 0 then
    redis.call('DEL', K) -- every reader's lease ended: the phase is over
    v = false
  elseif not writer_ahead() then
    return grant(false)
  end
end
if not v and not writer_ahead() then
  return grant(true)
end
if mode == 'q1' then
  q_join(Q, token, ARGV[5], ARGV[6], true)
end
if not v then
  return {0, -2}
end
return {0, redis.call('PTTL', K)}
