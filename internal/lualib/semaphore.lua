-- semaphore.lua: the state of a semaphore (prepended to the semaphore
-- scripts).
--
-- S  sorted set: holder token -> lease end (server ms, now_ms)
-- P  hash: holder token -> permits it holds; field '#used' = their sum
--    ('#' is not a token character, so the field cannot clash)
-- L  string: the limit set by SetLimit; absent: the caller's limit
-- Q  the wait queue (queue.lua); a waiter's payload is its channel,
--    '{' and the permits it asks for

-- sem_prune drops the holders whose lease ended, giving their permits
-- back, and returns the permits in use.
local function sem_prune(S, P, now)
  local dead = redis.call('ZRANGEBYSCORE', S, '-inf', now)
  for _, m in ipairs(dead) do
    local n = redis.call('HGET', P, m)
    if n then
      redis.call('HINCRBY', P, '#used', -tonumber(n))
      redis.call('HDEL', P, m)
    end
  end
  if #dead > 0 then
    redis.call('ZREMRANGEBYSCORE', S, '-inf', now)
  end
  return tonumber(redis.call('HGET', P, '#used') or '0')
end

-- sem_take records holder m with n permits until the server time untl.
local function sem_take(S, P, m, n, untl)
  redis.call('ZADD', S, untl, m)
  redis.call('HSET', P, m, n)
  redis.call('HINCRBY', P, '#used', n)
end

-- sem_pump hands free permits to the live waiters at the head of Q, in
-- order, while the first one's request fits (q_serve): each becomes a
-- holder with a pickup lease and is told (queue.lua's pickup state),
-- except self, the caller (asking for own permits), which confirms in the
-- same script. A request above the limit can never fit: it is taken
-- out of the queue and woken, so it fails instead of stalling everyone
-- behind it. A waiter queued twice (its first attempt run twice: the
-- Redis client re-sent it) is served once: an entry of a waiter that
-- holds permits already is dropped. Returns the permits left free.
local function sem_pump(S, P, Q, free, limit, now, pickup, self, own)
  q_serve(Q, self, true, function(m, req)
    if redis.call('ZSCORE', S, m) then
      return 'pop'
    end
    local n = own
    if m ~= self then
      n = tonumber(req) or 1
    end
    if n > limit then
      return 'deny'
    elseif n > free then
      return 'wait'
    end
    sem_take(S, P, m, n, now + tonumber(pickup))
    free = free - n
    if m == self then
      return 'pop'
    end
    return 'hand'
  end)
  return free
end

-- sem_settle makes S and P expire with the last holder's lease, or
-- deletes them when nobody holds a permit.
local function sem_settle(S, P)
  if not h_settle(P, S) then
    redis.call('DEL', P)
  end
end

-- sem_limit is the semaphore's limit: L's value, else the caller's; nil
-- if L is not a limit (another type, or not a number).
local function sem_limit(L, default)
  local l = redis.pcall('GET', L)
  if is_err(l) then
    return nil
  end
  return tonumber(l or default)
end

-- sem_ok reports whether P is a hash or absent (S is checked by the
-- caller's first ZSCORE).
local function sem_ok(P)
  return not is_err(redis.pcall('HLEN', P))
end
