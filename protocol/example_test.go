package protocol_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// setNX is a lock format of another program: the key holds the owner's
// token with a PX TTL, and nothing else (no fence, no queue).
type setNX struct{}

var (
	// Both reply with the reply codes: 1 done, 0 gone, -1 another owner's.
	cmpExpire = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
if v ~= ARGV[1] then return -1 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1`)
	cmpDelete = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
if v ~= ARGV[1] then return -1 end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], 'released')
return 1`)
)

func (setNX) Acquire(ctx context.Context, rdb redis.UniversalClient, k protocol.Keys, token string, ttl time.Duration) (protocol.Grant, error) {
	ok, err := rdb.SetNX(ctx, k.Lock, token, ttl).Result()
	if err != nil || ok {
		// Value is set even on an error: the SET may have run, and the
		// engine then deletes the key if it holds token.
		return protocol.Grant{Acquired: ok, Value: token}, err
	}
	pttl, err := rdb.PTTL(ctx, k.Lock).Result()
	return protocol.Grant{HolderTTL: pttl}, err
}

func (setNX) Renew(k protocol.Keys, value string, ttl time.Duration) (protocol.Call, string) {
	return protocol.Call{Script: cmpExpire, Keys: []string{k.Lock}, Args: []any{value, ttl.Milliseconds()}}, value
}

func (setNX) Release(k protocol.Keys, value string) protocol.Call {
	return protocol.Call{Script: cmpDelete, Keys: []string{k.Lock}, Args: []any{value, k.Wake}}
}

// A Protocol of your own, selected per call with dlock.WithProtocol: the
// engine waits, renews, signals a loss and releases it like any lock.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	locks, err := dlock.New(rdb, dlock.Options{})
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	lk, err := locks.Lock(ctx, "example:protocol", dlock.WithProtocol(setNX{}), dlock.WithTTL(time.Second))
	if err != nil {
		panic(err)
	}
	fmt.Println("key holds the token:", rdb.Get(ctx, "example:protocol").Val() == lk.Token())

	_, err = locks.TryLock(ctx, "example:protocol", dlock.WithProtocol(setNX{}))
	fmt.Println("second caller:", errors.Is(err, dlock.ErrNotAcquired))

	if err := lk.Unlock(ctx); err != nil {
		panic(err)
	}
	fmt.Println("key after Unlock:", rdb.Exists(ctx, "example:protocol").Val())
	// Output:
	// key holds the token: true
	// second caller: true
	// key after Unlock: 0
}

// Run sends a script by EVALSHA, and by EVAL if the server does not have
// it (after a restart, a failover or SCRIPT FLUSH).
func ExampleCall_Run() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	rdb.Set(ctx, "example:run", "token-1", time.Minute)

	release := protocol.Call{Script: cmpDelete, Keys: []string{"example:run"}, Args: []any{"token-2", "example:run:wake"}}
	code, err := release.Run(ctx, rdb).Int64()
	fmt.Println(code == protocol.ReplyOtherOwner, err)

	release.Args[0] = "token-1"
	code, err = release.Run(ctx, rdb).Int64()
	fmt.Println(code == protocol.ReplyOK, err)
	// Output:
	// true <nil>
	// true <nil>
}
