package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultcmd"
	"github.com/redis/go-redis/v9"
)

// blockWriters occupies every writer of c's pipeline with an acquire held
// by inj until an ECHO of release completes; it returns when all are held.
// wait waits for them and returns their first error. A cleanup releases
// them if the test ends first.
func blockWriters(t *testing.T, c *dlock.Client, rdb redis.UniversalClient, inj *faultcmd.Injector, prefix, release string) (wait func() error) {
	t.Helper()
	t.Cleanup(func() { _ = rdb.Echo(context.Background(), release).Err() })
	n := dlock.PipelineWriters(c)
	errs := make(chan error, n)
	for i := range n {
		k := fmt.Sprintf("%s:block:%d", prefix, i)
		h := inj.Add(faultcmd.Rule{Name: "busy writer", Action: faultcmd.Hold, HoldTimeout: time.Minute,
			Match: faultcmd.Match{Script: "acquire", Key: k}, Until: faultcmd.Match{Cmd: "echo", Arg: release}})
		go func() {
			lk, err := c.TryLock(context.Background(), k, dlock.WithoutRenewal())
			if err == nil {
				err = lk.Unlock(context.Background())
			}
			if err != nil {
				err = fmt.Errorf("blocked writer %s: %w", k, err)
			}
			errs <- err
		}()
		await(t, h.FiredC(), "a writer held")
	}
	return func() error {
		var first error
		for range n {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		return first
	}
}

// waitPending waits until n calls wait in c's pipeline.
func waitPending(t *testing.T, c *dlock.Client, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for dlock.PendingCalls(c) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls pending, want %d", dlock.PendingCalls(c), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A caller whose ctx ends while its call is in flight in a batch gets an
// ambiguous error; the grant that lands after it left is withdrawn, so the
// key is not left held by nobody.
func TestPipelineLateGrantIsWithdrawn(t *testing.T) {
	rdb := srv.NewClient()
	inj := faultcmd.New()
	rdb.AddHook(inj)
	c, _ := newClientOn(t, rdb, dlock.Options{})
	ctx := context.Background()
	prefix := t.Name()
	late := prefix + ":late"
	// The batch that carries late's acquire is held until ECHO batch.
	held := inj.Add(faultcmd.Rule{Name: "batch in flight", Action: faultcmd.Hold, HoldTimeout: time.Minute,
		Match: faultcmd.Match{Script: "acquire", Key: late}, Until: faultcmd.Match{Cmd: "echo", Arg: "batch"}})

	writers := blockWriters(t, c, rdb, inj, prefix, "go")
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := c.TryLock(lctx, late, dlock.WithoutRenewal())
		done <- err
	}()
	var other *dlock.Lock
	var otherErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		other, otherErr = c.TryLock(ctx, prefix+":other", dlock.WithoutRenewal())
	}()
	waitPending(t, c, 2)
	// One writer gets free: it takes both waiting calls as one batch,
	// which the rule holds.
	if err := rdb.Echo(ctx, "go").Err(); err != nil {
		t.Fatal(err)
	}
	await(t, held.FiredC(), "the batch held")
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, dlock.ErrContextDone) {
			t.Fatalf("TryLock: %v, want ErrContextDone", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the caller did not leave when its ctx ended")
	}
	if err := rdb.Echo(ctx, "batch").Err(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := writers(); err != nil {
		t.Fatal(err)
	}
	if otherErr != nil {
		t.Fatalf("the other call in the batch: %v", otherErr)
	}
	_ = other.Unlock(ctx)
	// Close waits for the background withdrawal.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if v, err := rdb.Get(ctx, late).Result(); err != redis.Nil {
		t.Fatalf("the late grant is left: the key holds %q (%v)", v, err)
	}
}

// valueClient is a UniversalClient that is not a pointer and not
// comparable: a Client over it works (nothing may hash or compare it).
type valueClient struct {
	*redis.Client
	tags []string
}

func TestPipelineNonPointerClient(t *testing.T) {
	rdb := srv.NewClient()
	vc := valueClient{Client: rdb, tags: []string{"x"}}
	c, err := dlock.New(vc, dlock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lk, err := c.TryLock(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}
