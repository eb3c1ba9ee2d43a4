package rexec_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/faultcmd"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/rexec"
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// srv is the redis-server the package's tests share.
var srv *redistest.Server

func TestMain(m *testing.M) {
	os.Exit(redistest.RunShared(m, "rexec", func(s *redistest.Server) { srv = s }))
}

var seq atomic.Int64

// key returns a key no other test uses.
func key(t testing.TB, what string) string {
	return fmt.Sprintf("rexec-test:%s:%s:%d", t.Name(), what, seq.Add(1))
}

// faulty returns a go-redis client to srv with a fault injector and a
// pipeline counter, closed at the end of the test, and an Exec over it.
func faulty(t *testing.T) (*rexec.Exec, *redis.Client, *faultcmd.Injector, *pipelineCounter) {
	t.Helper()
	rdb := srv.NewClient()
	inj, pc := faultcmd.New(), &pipelineCounter{}
	rdb.AddHook(inj)
	rdb.AddHook(pc)
	t.Cleanup(func() {
		if t.Failed() {
			for _, e := range inj.Log() {
				t.Log("fault:", e)
			}
		}
		_ = rdb.Close()
	})
	return rexec.New(rdb), rdb, inj, pc
}

// acquire is acquire.lua's call taking the lock k for token, without
// queueing: one of package dlock's scripts, so it goes through the
// pipeline. Its reply is {1, fence} when granted.
func acquire(k, token string) protocol.Call {
	return protocol.Call{Script: scripts.Acquire, Keys: []string{k, k + ":fence", k + ":queue", k + ":waiters", k + ":tombs"},
		Args: []any{token, int64(60000), int64(70000), "try"}}
}

// granted reports whether cmd is acquire.lua's grant.
func granted(cmd *redis.Cmd) error {
	res, err := cmd.Int64Slice()
	if err != nil {
		return err
	}
	if len(res) != 2 || res[0] != 1 || res[1] < 1 {
		return fmt.Errorf("acquire replied %v, want a grant", res)
	}
	return nil
}

// pipelineCounter records the size of every pipeline its client sends.
type pipelineCounter struct {
	mu    sync.Mutex
	sizes []int
}

func (*pipelineCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (p *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		p.mu.Lock()
		p.sizes = append(p.sizes, len(cmds))
		p.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (p *pipelineCounter) got() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int(nil), p.sizes...)
}

// blockWriters occupies every writer of x with an acquire held by inj
// until an ECHO of release completes; it returns when all are held. wait
// waits for them and returns their first error. A cleanup releases them
// if the test ends first.
func blockWriters(t *testing.T, x *rexec.Exec, rdb *redis.Client, inj *faultcmd.Injector, release string) (wait func() error) {
	t.Helper()
	t.Cleanup(func() { _ = rdb.Echo(context.Background(), release).Err() })
	n := x.Writers()
	errs := make(chan error, n)
	for i := range n {
		k := key(t, fmt.Sprintf("block:%d", i))
		h := inj.Add(faultcmd.Rule{Name: "busy writer", Action: faultcmd.Hold, HoldTimeout: time.Minute,
			Match: faultcmd.Match{Script: "acquire", Key: k}, Until: faultcmd.Match{Cmd: "echo", Arg: release}})
		go func() {
			if err := granted(x.Run(context.Background(), acquire(k, "w"))); err != nil {
				errs <- fmt.Errorf("blocked writer %s: %w", k, err)
				return
			}
			errs <- nil
		}()
		select {
		case <-h.FiredC():
		case <-time.After(time.Minute):
			t.Fatal("a writer was not held")
		}
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

// waitPending waits until n calls wait in x's pipeline.
func waitPending(t *testing.T, x *rexec.Exec, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for x.Pending() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls pending, want %d", x.Pending(), n)
		}
		time.Sleep(time.Millisecond)
	}
}
