package legacy_test

//lint:file-ignore SA1019 older clients take the lock with GETSET; these tests speak it on the wire as they do

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The seeds' clients, ported command for command: SETNX, GET, GETSET and
// DEL, no Lua, no TTL. They stand for the existing services a dlock legacy
// holder has to share its key with.

// pythonClient is seed 004's Python (redis-py) loop, in seconds:
//
//	while lock != 1:
//	    now = int(time.time())
//	    lock_timeout = now + LOCK_TIMEOUT + 1
//	    lock = redis_client.setnx(lock_key, lock_timeout)
//	    if lock == 1 or (now > int(redis_client.get(lock_key))) and now > int(redis_client.getset(lock_key, lock_timeout)):
//	        break
//	    else:
//	        time.sleep(0.001)
//	do_job()
//	now = int(time.time())
//	if now < lock_timeout:
//	    redis_client.delete(lock_key)
type pythonClient struct {
	rdb     *redis.Client
	key     string
	timeout int64            // LOCK_TIMEOUT in seconds (seed: 3)
	clock   func() time.Time // nil: time.Now
}

// pyInt is Python's int() of a reply: it raises on nil (int(None)) and on
// anything but an integer literal.
func pyInt(s string, err error) (int64, bool) {
	if err != nil {
		return 0, false
	}
	n, perr := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	return n, perr == nil
}

func (p *pythonClient) now() int64 {
	if p.clock != nil {
		return p.clock().Unix()
	}
	return time.Now().Unix()
}

// lock runs the seed's acquire loop until it holds the lock, and returns
// its lock_timeout. Where Python would raise (int(None) after the key
// vanished, int() of a non-number), the port starts the loop over, as a
// supervisor restarting the job would. It gives up when ctx ends.
func (p *pythonClient) lock(ctx context.Context) (lockTimeout int64, err error) {
	for {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		now := p.now()
		lockTimeout = now + p.timeout + 1
		lock, err := p.rdb.Do(ctx, "SETNX", p.key, lockTimeout).Int64()
		if err != nil {
			return 0, err
		}
		if lock == 1 {
			return lockTimeout, nil
		}
		if cur, ok := pyInt(p.rdb.Get(ctx, p.key).Result()); ok && now > cur {
			if old, ok := pyInt(p.rdb.GetSet(ctx, p.key, lockTimeout).Result()); ok && now > old {
				return lockTimeout, nil
			}
		}
		time.Sleep(time.Millisecond)
	}
}

// unlock is the seed's release: DEL only if its own lock_timeout has not
// passed by its own clock.
func (p *pythonClient) unlock(ctx context.Context, lockTimeout int64) error {
	if p.now() < lockTimeout {
		return p.rdb.Del(ctx, p.key).Err()
	}
	return nil
}

// csharpClient is seed 000's C# (CSRedis) loop, in milliseconds:
//
//	while (!getLocked) {
//	    var now = DateTimeOffset.Now.ToUnixTimeMilliseconds();
//	    var lock_time = now + _lock_timeout + 1;
//	    getLocked = RedisHelper.SetNx(key, lock_time);
//	    if (getLocked || now > RedisHelper.Get<long>(key) && now > RedisHelper.GetSet<long>(key, lock_time))
//	        getLocked = true;
//	    else
//	        Thread.Sleep(30);
//	}
//	...
//	if (DateTimeOffset.Now.ToUnixTimeMilliseconds() < RedisHelper.Get<long>(_lock_key))
//	    RedisHelper.Del(_lock_key);
type csharpClient struct {
	rdb     *redis.Client
	key     string
	timeout int64         // _lock_timeout in milliseconds (seed: 40)
	sleep   time.Duration // Thread.Sleep (seed: 30ms)
	clock   func() time.Time
}

func (c *csharpClient) now() int64 {
	if c.clock != nil {
		return c.clock().UnixMilli()
	}
	return time.Now().UnixMilli()
}

var errCSharpParse = errors.New("csharp: value is not a long")

// getLong is CSRedis's Get<long>/GetSet<long>: nil reads as 0 (default(long)),
// a non-number throws.
func getLong(s string, err error) (int64, error) {
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n, perr := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if perr != nil {
		return 0, errCSharpParse
	}
	return n, nil
}

// lock runs the seed's GetLock loop. An exception ends it with false, as
// in the seed (caught, printed, getLocked stays false). It gives up when
// ctx ends.
func (c *csharpClient) lock(ctx context.Context) (bool, error) {
	for {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		now := c.now()
		lockTime := now + c.timeout + 1
		n, err := c.rdb.Do(ctx, "SETNX", c.key, lockTime).Int64()
		if err != nil {
			return false, err
		}
		if n == 1 {
			return true, nil
		}
		cur, err := getLong(c.rdb.Get(ctx, c.key).Result())
		if err != nil {
			return false, err
		}
		if now > cur {
			old, err := getLong(c.rdb.GetSet(ctx, c.key, lockTime).Result())
			if err != nil {
				return false, err
			}
			if now > old {
				return true, nil
			}
		}
		time.Sleep(c.sleep)
	}
}

// unlock is the seed's release: DEL if the stored time is still ahead.
func (c *csharpClient) unlock(ctx context.Context) error {
	cur, err := getLong(c.rdb.Get(ctx, c.key).Result())
	if err != nil {
		return err
	}
	if c.now() < cur {
		return c.rdb.Del(ctx, c.key).Err()
	}
	return nil
}
