package dlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// plainSetNX is a minimal custom protocol: SET NX PX, GET-compare scripts,
// no fence, no queue; it renews and releases directly.
type plainSetNX struct {
	renews, releases atomic.Int64
}

var (
	cmpExpire = redis.NewScript(`local v = redis.call('GET', KEYS[1]) if not v then return 0 end if v ~= ARGV[1] then return -1 end redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1`)
	cmpDelete = redis.NewScript(`local v = redis.call('GET', KEYS[1]) if not v then return 0 end if v ~= ARGV[1] then return -1 end redis.call('DEL', KEYS[1]) redis.call('PUBLISH', ARGV[2], 'released') return 1`)
)

func (p *plainSetNX) Acquire(ctx context.Context, rdb redis.UniversalClient, k protocol.Keys, token string, ttl time.Duration) (protocol.Grant, error) {
	ok, err := rdb.SetNX(ctx, k.Lock, token, ttl).Result()
	if err != nil || ok {
		return protocol.Grant{Acquired: ok, Value: token}, err
	}
	pttl, err := rdb.PTTL(ctx, k.Lock).Result()
	return protocol.Grant{Value: token, HolderTTL: pttl}, err
}

func (p *plainSetNX) Renew(k protocol.Keys, v string, ttl time.Duration) (protocol.Call, string) {
	return protocol.Call{Script: cmpExpire, Keys: []string{k.Lock}, Args: []any{v, ttl.Milliseconds()}}, v
}

func (p *plainSetNX) Release(k protocol.Keys, v string) protocol.Call {
	return protocol.Call{Script: cmpDelete, Keys: []string{k.Lock}, Args: []any{v, k.Wake}}
}

// directSetNX renews and releases by itself (as a multi-server protocol
// would), through the same scripts on its own connection.
type directSetNX struct {
	plainSetNX
	rdb redis.UniversalClient
}

func (p *directSetNX) RenewDirect(ctx context.Context, k protocol.Keys, v string, ttl time.Duration) (string, int64, error) {
	p.renews.Add(1)
	c, next := p.Renew(k, v, ttl)
	code, err := c.Run(ctx, p.rdb).Int64()
	return next, code, err
}

func (p *directSetNX) ReleaseDirect(ctx context.Context, k protocol.Keys, v string) (int64, error) {
	p.releases.Add(1)
	return p.Release(k, v).Run(ctx, p.rdb).Int64()
}

func TestCustomProtocols(t *testing.T) {
	c, rdb := newClient(t, dlock.Options{})
	for name, p := range map[string]protocol.Protocol{"scripted": &plainSetNX{}, "direct": &directSetNX{rdb: rdb}} {
		t.Run(name, func(t *testing.T) {
			k := key(t)
			lk, err := c.Lock(t.Context(), k, dlock.WithProtocol(p), dlock.WithTTL(900*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			// A second caller waits (not queued: the protocol has no queue)
			// and is woken by the protocol's release.
			got := make(chan error, 1)
			go func() {
				l2, err := c.Lock(t.Context(), k, dlock.WithProtocol(p))
				if err == nil {
					err = l2.Unlock(t.Context())
				}
				got <- err
			}()
			time.Sleep(2 * time.Second) // the watchdog renews it meanwhile
			if err := lk.Err(); err != nil {
				t.Fatalf("lost under the watchdog: %v", err)
			}
			if err := lk.Unlock(t.Context()); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Fatal(err)
			}
			if d, ok := p.(*directSetNX); ok && (d.renews.Load() < 2 || d.releases.Load() < 2) {
				t.Fatalf("direct protocol: %d renewals, %d releases", d.renews.Load(), d.releases.Load())
			}
		})
	}
	if _, err := c.Lock(t.Context(), key(t), dlock.WithProtocol(nil)); err == nil {
		t.Fatal("nil protocol accepted")
	}
}
