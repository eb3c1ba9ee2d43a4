-- lib/fence.lua: fencing tokens and key lifetimes. Prepended (with the
-- other lib/*.lua files) to every script that grants; it defines local
-- functions only and runs no command of its own.

-- keep_for makes key live at least ms more milliseconds: its TTL is raised,
-- never lowered (holders with different TTLs share some keys). A key
-- without a TTL gets one; a missing key is left missing.
local function keep_for(key, ms)
  if redis.call('PTTL', key) < tonumber(ms) then
    redis.call('PEXPIRE', key, ms)
  end
end

-- fence_next draws the next fencing token from the counter f, which then
-- lives at least fttl ms more. An absent counter (never used, or expired)
-- restarts from the server's TIME in microseconds: above every token handed
-- out before it expired.
local function fence_next(f, fttl)
  local n = redis.call('INCR', f)
  if n == 1 then
    local t = redis.call('TIME')
    n = tonumber(t[1]) * 1000000 + tonumber(t[2])
    redis.call('SET', f, string.format('%d', n), 'PX', fttl)
  else
    -- GT: only ever raised (the counter always has a TTL: it is created
    -- with one just above). One call instead of PTTL + PEXPIRE.
    redis.call('PEXPIRE', f, fttl, 'GT')
  end
  return n
end

-- now_ms is the server's clock in milliseconds: the scale of every lease
-- deadline stored in a sorted set (lib/holds.lua, the semaphore).
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
