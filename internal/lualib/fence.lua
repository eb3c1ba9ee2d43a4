-- fence.lua: fencing tokens, key lifetimes and type checks. Prepended
-- (with the other library files) to every script that grants; it
-- defines local functions only and runs no command of its own.

-- is_err reports whether r, a redis.pcall reply, is an error (WRONGTYPE:
-- the key exists but is not of the type the script expects).
local function is_err(r)
  return type(r) == 'table' and r.err ~= nil
end

-- keep_for makes key live at least ms more milliseconds: its TTL is raised,
-- never lowered (holders with different TTLs share some keys), and a key
-- without a TTL is left without one (it is not ours: we create every key
-- with a TTL). A missing key is left missing.
local function keep_for(key, ms)
  redis.call('PEXPIRE', key, ms, 'GT')
end

-- fence_value returns the counter value of v, a GET (pcall) reply of a
-- fence counter: 0 if it does not exist, nil if it is not a counter (not
-- a string of decimal digits: another program's key under our name).
local function fence_value(v)
  if not v then
    return 0
  end
  if is_err(v) or not string.match(v, '^%d+$') or #v > 16 then
    return nil
  end
  return tonumber(v)
end

-- fence_read returns the fence counter f's value (see fence_value).
-- Scripts call it before their first write, so a foreign key there ends
-- them with nothing written.
local function fence_read(f)
  return fence_value(redis.pcall('GET', f))
end

-- fence_mget returns the counter value of f from v, f's element of an MGET
-- reply (see fence_value). MGET answers nil for a key of another type as
-- for a missing one, so only then is f read again (fence_read: its type
-- is checked before any write; a missing counter costs that second read).
local function fence_mget(f, v)
  if not v then
    return fence_read(f)
  end
  return fence_value(v)
end

-- server_time returns the server's TIME, read once per script run: clk,
-- a table of the run (nil: read it now), keeps it for the run's other
-- callers. A Function library's top-level locals outlive a call, so the
-- cache is the caller's, never the library's.
local function server_time(clk)
  if not clk then
    return redis.call('TIME')
  end
  if not clk.tm then
    clk.tm = redis.call('TIME')
  end
  return clk.tm
end

-- fence_draw draws the next fencing token after c (f's value, from
-- fence_read): max(c + 1, the server's TIME in microseconds). The counter
-- then lives at least fttl ms more. excl: the grant is exclusive (no other
-- grant of this counter is live), so the counter's TTL is set to fttl,
-- not raised: only the clock margin after this grant matters (below), and
-- a shared hold renews its own. The counter makes tokens unique and
-- increasing on one server; the clock keeps them increasing when the
-- counter is gone or behind: after it expired, after a restart without
-- persistence, or on a replica promoted before it received the last grants
-- (as long as that server's clock is not behind the old one's). clk: see
-- server_time.
local function fence_draw(f, c, fttl, excl, clk)
  local t = server_time(clk)
  local n = math.max(c + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
  local ms = tonumber(fttl)
  if c > 0 and not excl then
    ms = math.max(ms, redis.call('PTTL', f))
  end
  redis.call('SET', f, string.format('%d', n), 'PX', ms)
  return n
end

-- fence_swap is fence_draw for an exclusive grant whose counter was not
-- read before: the draw's SET reads the old value (GET), so one write
-- does both. If the old value is ahead of the clock, the counter is set
-- again, above it. Returns nil if f is not a counter: a key of another
-- type is left as it was (SET ... GET refuses it), another program's
-- string is put back (without a TTL: it had none, or a TTL the swap
-- cannot know), and the caller undoes its grant.
local function fence_swap(f, fttl, clk)
  local t = server_time(clk)
  local n = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local old = redis.pcall('SET', f, string.format('%d', n), 'PX', fttl, 'GET')
  if is_err(old) then
    return nil
  end
  local c = fence_value(old)
  if not c then
    redis.call('SET', f, old)
    return nil
  end
  if c >= n then
    n = c + 1
    redis.call('SET', f, string.format('%d', n), 'PX', fttl)
  end
  return n
end

-- now_ms is the server's clock in milliseconds: the scale of every lease
-- deadline stored in a sorted set or hash (holds.lua, the semaphore, the
-- waiters of queue.lua). clk: see server_time.
local function now_ms(clk)
  local t = server_time(clk)
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
