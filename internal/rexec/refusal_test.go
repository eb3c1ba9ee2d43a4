package rexec_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/faultcmd"
	"github.com/dlock-go/dlock/internal/rexec"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// A refusal: an error reply by which a Cluster node refuses a command
// before running it, as the fault layer returns it in place of sending
// the command.
type refusal string

func (e refusal) Error() string { return string(e) }
func (refusal) RedisError()     {}

const (
	tryAgain = refusal("TRYAGAIN Multiple keys request during rehashing of slot")
	askElse  = refusal("ASK 11694 127.0.0.1:1")
	// Raised by a script part-way through (after its earlier writes): not
	// a refusal, never retried blindly.
	nonLocal = refusal("ERR Script attempted to access a non local key in a cluster node script: 0123, on @user_script:39.")
)

func TestIsRefusal(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{tryAgain, true}, {askElse, true}, {refusal("MOVED 3999 127.0.0.1:6381"), true},
		{refusal("CLUSTERDOWN The cluster is down"), true}, {refusal("LOADING Redis is loading"), true},
		{refusal("MASTERDOWN Link with MASTER is down"), true},
		{nonLocal, false}, {refusal("TRYAGAINX"), false}, {refusal("ERR wrong number of arguments"), false},
		{errors.New("TRYAGAIN not a Redis reply"), false}, {nil, false},
	} {
		if got := rexec.IsRefusal(c.err); got != c.want {
			t.Errorf("IsRefusal(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// MayFollowRun: the replies go-redis sends a call again on (refusals,
// READONLY, NOREPLICAS, too many clients), also as the error of a call
// refused until its bound; not an error a script raised, nor another
// error reply.
func TestMayFollowRun(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{tryAgain, true}, {refusal("CLUSTERDOWN The cluster is down"), true},
		{refusal("READONLY You can't write against a read only replica."), true},
		{refusal("NOREPLICAS Not enough good replicas to write."), true},
		{refusal("ERR max number of clients reached"), true},
		{nonLocal, false}, {refusal("ERR wrong number of arguments"), false},
		{refusal("READONLYX"), false}, {errors.New("READONLY not a Redis reply"), false}, {nil, false},
	} {
		if got := rexec.MayFollowRun(c.err); got != c.want {
			t.Errorf("MayFollowRun(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	x, _, inj, _ := faulty(t)
	k := key(t, "k")
	inj.Add(faultcmd.Rule{Action: faultcmd.FailBefore, Times: -1, Match: faultcmd.Match{Script: "acquire", Key: k}, Err: tryAgain})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := x.Run(ctx, acquire(k, "t")).Err(); !rexec.MayFollowRun(err) {
		t.Fatalf("a call refused until its bound: %v, not MayFollowRun", err)
	}
}

// A refused call is sent again until it runs, each refusal counted; a
// call refused until ctx's deadline answers with the last refusal, how
// many tries and for how long; an error a script raised is answered at
// once.
func TestRefusedCallRetried(t *testing.T) {
	x, _, inj, _ := faulty(t)
	k := key(t, "k")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := inj.Add(faultcmd.Rule{Action: faultcmd.FailBefore, Times: 3, Match: faultcmd.Match{Script: "acquire", Key: k}, Err: tryAgain})
	if err := granted(x.Run(ctx, acquire(k, "t"))); err != nil {
		t.Fatalf("Run refused 3 times: %v", err)
	}
	if h.Fired() != 3 || x.Refusals() != 3 {
		t.Fatalf("rule fired %d, refusals counted %d; want 3, 3", h.Fired(), x.Refusals())
	}

	k = key(t, "deadline")
	inj.Add(faultcmd.Rule{Action: faultcmd.FailBefore, Times: -1, Match: faultcmd.Match{Script: "acquire", Key: k}, Err: askElse})
	dctx, dcancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer dcancel()
	start := time.Now()
	err := x.Run(dctx, acquire(k, "t")).Err()
	var re redis.Error
	if !errors.As(err, &re) || !errors.Is(err, askElse) || !strings.HasPrefix(err.Error(), string(askElse)+" (refused ") {
		t.Fatalf("Run refused until its deadline = %v; want a Redis error reply naming %q and the tries", err, askElse)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("Run gave up after %v, before its deadline", took)
	}

	k = key(t, "raised")
	before := x.Refusals()
	h = inj.Add(faultcmd.Rule{Action: faultcmd.FailBefore, Times: -1, Match: faultcmd.Match{Script: "acquire", Key: k}, Err: nonLocal})
	if err := x.Run(ctx, acquire(k, "t")).Err(); !errors.Is(err, nonLocal) {
		t.Fatalf("Run whose script failed part-way = %v, want %v", err, nonLocal)
	}
	if h.Fired() != 1 || x.Refusals() != before {
		t.Fatalf("script failed part-way: sent %d times, %d refusals counted; want 1, 0", h.Fired(), x.Refusals()-before)
	}
}

// A refused call is not sent past the bound WithRefusalBound sets, even
// when its ctx allows more.
func TestRefusalBound(t *testing.T) {
	x, _, inj, _ := faulty(t)
	k := key(t, "k")
	const name = "refused to the end"
	inj.Add(faultcmd.Rule{Name: name, Action: faultcmd.FailBefore, Times: -1, Match: faultcmd.Match{Script: "acquire", Key: k}, Err: tryAgain})
	bound := time.Now().Add(300 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := x.Run(rexec.WithRefusalBound(ctx, bound), acquire(k, "t")).Err(); !errors.Is(err, tryAgain) {
		t.Fatalf("Run refused past its bound = %v, want %v", err, tryAgain)
	}
	for _, e := range inj.Log() {
		if e.Rule == name && e.At.After(bound) {
			t.Fatalf("call sent at %v, after its bound %v", e.At, bound)
		}
	}
}

// In a batch, only the refused calls are sent again; a pipeline of reads
// is sent again whole.
func TestRefusedBatchRetried(t *testing.T) {
	x, rdb, inj, _ := faulty(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := key(t, "a"), key(t, "b")
	ha := inj.Add(faultcmd.Rule{Action: faultcmd.Observe, Times: -1, Match: faultcmd.Match{Script: "acquire", Key: a}})
	hb := inj.Add(faultcmd.Rule{Action: faultcmd.FailBefore, Times: 2, Match: faultcmd.Match{Script: "acquire", Key: b}, Err: tryAgain})
	for i, cmd := range x.Batch(ctx, []protocol.Call{acquire(a, "t"), acquire(b, "t")}) {
		if err := granted(cmd); err != nil {
			t.Fatalf("Batch, call %d: %v", i, err)
		}
	}
	if ha.Fired() != 1 || hb.Fired() != 2 || x.Refusals() != 2 {
		t.Fatalf("sent the unrefused call %d times, refused %d, counted %d; want 1, 2, 2", ha.Fired(), hb.Fired(), x.Refusals())
	}

	if err := rdb.Set(ctx, a+":r", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	inj.Add(faultcmd.Rule{Action: faultcmd.FailBefore, Times: 1, Match: faultcmd.Match{Cmd: "get", Key: a + ":r"}, Err: tryAgain})
	var get *redis.StringCmd
	runs := 0
	if _, err := x.Pipelined(ctx, func(p redis.Pipeliner) error {
		runs++
		get = p.Get(ctx, a+":r")
		return nil
	}); err != nil {
		t.Fatalf("Pipelined: %v", err)
	}
	if v, err := get.Result(); err != nil || v != "v" || runs != 2 {
		t.Fatalf("Pipelined refused once: %q, %v after %d runs; want v after 2", v, err, runs)
	}
}

// A call riding out refusals stops when the Client closes: it fails at
// once with an error that matches the closed error and the last refusal,
// not at its deadline. A call of the Client's own clean-ups
// (OutlivingClose) keeps its bound.
func TestRefusalsEndOnClose(t *testing.T) {
	x, _, inj, _ := faulty(t)
	closing := make(chan struct{})
	errClosed := errors.New("test: client closed")
	x.EndRefusalsOn(closing, errClosed)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	k, b := key(t, "run"), key(t, "batch")
	hk := inj.Add(faultcmd.Rule{Action: faultcmd.FailBefore, Times: -1, Match: faultcmd.Match{Script: "acquire", Key: k}, Err: tryAgain})
	hb := inj.Add(faultcmd.Rule{Action: faultcmd.FailBefore, Times: -1, Match: faultcmd.Match{Script: "acquire", Key: b}, Err: tryAgain})
	type result struct {
		err  error
		when time.Time
	}
	run, batch := make(chan result, 1), make(chan result, 1)
	go func() {
		err := x.Run(ctx, acquire(k, "t")).Err()
		run <- result{err, time.Now()}
	}()
	go func() {
		err := x.Batch(ctx, []protocol.Call{acquire(b, "t")})[0].Err()
		batch <- result{err, time.Now()}
	}()
	for _, h := range []*faultcmd.Handle{hk, hb} {
		select {
		case <-h.FiredC():
		case <-time.After(time.Minute):
			t.Fatal("the call was not sent")
		}
	}
	time.Sleep(50 * time.Millisecond) // into the back-off
	closed := time.Now()
	close(closing)
	for name, c := range map[string]chan result{"Run": run, "Batch": batch} {
		var r result
		select {
		case r = <-c:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s still riding out refusals 30s after Close", name)
		}
		var re redis.Error
		if !errors.Is(r.err, errClosed) || !errors.Is(r.err, tryAgain) || !errors.As(r.err, &re) {
			t.Errorf("%s refused until Close = %v; want a Redis error reply matching %v and %v", name, r.err, errClosed, tryAgain)
		}
		took := r.when.Sub(closed)
		t.Logf("%s returned %v after Close: %v", name, took.Round(time.Millisecond), r.err)
		// A back-off wait is at most refusalMax (250ms); a call still
		// waiting for it at its deadline (a minute away) would show.
		if took > 10*time.Second {
			t.Errorf("%s returned %v after Close, not at once", name, took)
		}
	}

	o := key(t, "outliving")
	ho := inj.Add(faultcmd.Rule{Action: faultcmd.FailBefore, Times: -1, Match: faultcmd.Match{Script: "acquire", Key: o}, Err: tryAgain})
	octx := rexec.OutlivingClose(rexec.WithRefusalBound(ctx, time.Now().Add(2*time.Second)))
	err := x.Run(octx, acquire(o, "t")).Err()
	if !errors.Is(err, tryAgain) || errors.Is(err, errClosed) {
		t.Fatalf("clean-up refused after Close = %v; want %v, not %v", err, tryAgain, errClosed)
	}
	if ho.Fired() < 2 {
		t.Fatalf("clean-up sent %d times after Close; want it sent again until its bound", ho.Fired())
	}
}
