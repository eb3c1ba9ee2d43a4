-- holds.lua: leased handles of a shared hold (prepended).
--
-- A hold set H is a sorted set: member = one handle's token, score = the
-- server time in ms (now_ms) at which that handle's lease ends. Each handle
-- renews its own score, so a handle whose process died expires alone. The
-- lock key K, a string naming the hold (the reentrant owner, or the shared
-- marker of a read lock), and H itself expire when the last lease does.

-- h_count returns the number of handles in h (0 if h does not exist), or
-- nil if h is not a sorted set (another program's key under our name).
local function h_count(h)
  local n = redis.pcall('ZCARD', h)
  if is_err(n) then
    return nil
  end
  return n
end

-- h_live returns the lease end of token in h if it is still running.
local function h_live(h, token, now)
  local s = redis.call('ZSCORE', h, token)
  if s and tonumber(s) > now then
    return tonumber(s)
  end
  return nil
end

-- h_prune drops the handles whose lease has ended.
local function h_prune(h, now)
  redis.call('ZREMRANGEBYSCORE', h, '-inf', now)
end

-- h_settle makes k and h expire when the last lease in h ends. It returns
-- false, touching nothing, if h is empty (no such key).
local function h_settle(k, h)
  local last = redis.call('ZRANGE', h, -1, -1, 'WITHSCORES')
  if #last == 0 then
    return false
  end
  redis.call('PEXPIREAT', k, last[2])
  redis.call('PEXPIREAT', h, last[2])
  return true
end
