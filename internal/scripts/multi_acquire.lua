-- multi_acquire.lua: take several exclusive locks in one slot at once.
-- Each key is a token lock (acquire.lua's layout), so single-key lockers
-- and multi-key lockers of the same keys exclude each other and share the
-- queues. Uses lualib/fence.lua and lualib/queue.lua (prepended).
--
-- KEYS     quintuples, in the canonical order (sorted): KEYS[5i-4] a lock
--          key, KEYS[5i-3] its fence counter, KEYS[5i-2] its wait queue,
--          KEYS[5i-1] its waiters' leases, KEYS[5i] its tombstones
--          (lualib/queue.lua)
-- ARGV[1]  the caller's token (the same in every key)
-- ARGV[2]  the lock TTL in milliseconds
-- ARGV[3]  the fence counters' TTL in milliseconds
-- ARGV[4]  mode: 'try' / 'barge': all or nothing (barge ignores queues)
--                'q1' / 'q': in order, take each key that is free (and
--                whose queue has no live waiter ahead) or already ours,
--                and keep them; at the first key that is not, join its
--                queue and stop. Hand-offs then arrive for that key, and
--                the next attempt goes on from there ('q' refreshes the
--                waiter's lease in that queue first, and puts it back at
--                the head if a hand-off of that key to it lapsed). Holding the keys
--                before it while waiting cannot deadlock: every locker
--                takes keys in the same order.
-- ARGV[5]  (q1, q) the waiter's queue payload: its hand-off channel
-- ARGV[6]  (q1, q) the waiter's queue lease in milliseconds
--
-- Returns {1, fence1, ..., fenceN}  all keys acquired; one fencing token
--                                   per key, in KEYS order
--         {0, pttl, i}   not acquired: key i (1-based) is held (pttl as in
--                        acquire.lua); in q modes keys before i are ours
--         {-2, 0, i}     key i (or its counter or queue) exists with another
--                        type; nothing was written
local token, mode = ARGV[1], ARGV[4]
local queued = mode == 'q1' or mode == 'q'
local n = #KEYS / 5
local qs = {}
for i = 1, n do
  qs[i] = q_keys(KEYS[5 * i - 2], KEYS[5 * i - 1], KEYS[5 * i])
  local dead = q_dead(qs[i], token)
  if dead == nil then
    return {-2, 0, i}
  elseif dead then
    return {0, -2, i} -- a withdrawn token (lualib/queue.lua): never granted again
  end
end
local vals, fences = {}, {}
for i = 1, n do
  local v = redis.pcall('GET', KEYS[5 * i - 4])
  fences[i] = fence_read(KEYS[5 * i - 3])
  if is_err(v) or not fences[i] or (queued and not q_ok(qs[i])) then
    return {-2, 0, i}
  end
  vals[i] = v
end

local function blocked(i)
  if not vals[i] then
    return {0, -2, i}
  end
  return {0, redis.call('PTTL', KEYS[5 * i - 4]), i}
end

if not queued then
  for i = 1, n do
    local v = vals[i]
    if v ~= token and v then
      return blocked(i)
    end
    if v ~= token and mode ~= 'barge' then
      local ahead = q_ahead(qs[i], token)
      if ahead == nil then
        return {-2, 0, i}
      elseif ahead then
        return blocked(i)
      end
    end
  end
  for i = 1, n do
    redis.call('SET', KEYS[5 * i - 4], token, 'PX', ARGV[2])
  end
else
  for i = 1, n do
    local k, q, v = KEYS[5 * i - 4], qs[i], vals[i]
    if v == token then
      redis.call('PEXPIRE', k, ARGV[2])
      q_granted(q, token)
    else
      if mode == 'q' then
        -- Refresh or rejoin this key's queue first: back at the head if a
        -- hand-off of this key lapsed. A first join goes to the tail.
        q_join(q, token, ARGV[5], ARGV[6], false)
      end
      if not v and not q_ahead(q, token) then
        redis.call('SET', k, token, 'PX', ARGV[2])
        q_granted(q, token)
      else
        if mode == 'q1' then
          q_join(q, token, ARGV[5], ARGV[6], false)
        end
        return blocked(i)
      end
    end
  end
end
local clk = {}
local r = {1}
for i = 1, n do
  r[i + 1] = fence_draw(KEYS[5 * i - 3], fences[i], ARGV[3], false, clk)
end
return r
