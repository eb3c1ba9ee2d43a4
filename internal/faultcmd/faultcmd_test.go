package faultcmd_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/faultcmd"
	"github.com/dlock-go/dlock/internal/probe"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

var srv *redistest.Server

func TestMain(m *testing.M) {
	os.Exit(redistest.RunShared(m, "faultcmd", func(s *redistest.Server) { srv = s }))
}

var seq atomic.Int64

func key(t *testing.T) string { return fmt.Sprintf("%s#%d", t.Name(), seq.Add(1)) }

// client returns a client with a fresh Injector attached, and a plain one.
func client(t *testing.T) (*redis.Client, *faultcmd.Injector, *redis.Client) {
	t.Helper()
	rdb, plain := srv.NewClient(), srv.NewClient()
	inj := faultcmd.New()
	rdb.AddHook(inj)
	t.Cleanup(func() {
		for _, e := range inj.Log() {
			t.Log(e)
		}
		_ = rdb.Close()
		_ = plain.Close()
	})
	return rdb, inj, plain
}

// isRedisError is dlock's test for "definite": an error reply from Redis.
func isRedisError(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

func TestDropReplyRunsTheCommand(t *testing.T) {
	rdb, inj, plain := client(t)
	ctx := context.Background()
	k := key(t)
	h := inj.Add(faultcmd.Rule{Action: faultcmd.DropReply, Match: faultcmd.Match{Cmd: "set", Key: k}})
	err := rdb.Set(ctx, k, "v", 0).Err()
	if !errors.Is(err, faultcmd.ErrDropped) || isRedisError(err) {
		t.Fatalf("err = %v: want ErrDropped, not a Redis error reply", err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("err = %v: want a net.Error timeout", err)
	}
	if v, _ := plain.Get(ctx, k).Result(); v != "v" {
		t.Fatalf("the dropped SET did not run: GET = %q", v)
	}
	if h.Fired() != 1 {
		t.Fatalf("fired %d, want 1", h.Fired())
	}
	select {
	case <-h.FiredC():
	default:
		t.Fatal("FiredC not closed")
	}
	// Times defaults to 1: the next SET passes.
	if err := rdb.Set(ctx, k, "w", 0).Err(); err != nil {
		t.Fatal(err)
	}
	log := inj.Log()
	if len(log) != 1 || log[0].Action != faultcmd.DropReply || !strings.Contains(log[0].Outcome, "OK") {
		t.Fatalf("log = %v", log)
	}
}

func TestFailBeforeIsDefinite(t *testing.T) {
	rdb, inj, plain := client(t)
	ctx := context.Background()
	k := key(t)
	inj.Add(faultcmd.Rule{Action: faultcmd.FailBefore, Match: faultcmd.Match{Key: k}})
	err := rdb.Set(ctx, k, "v", 0).Err()
	if !errors.Is(err, faultcmd.ErrFailed) || !isRedisError(err) {
		t.Fatalf("err = %v: want ErrFailed, a Redis error reply", err)
	}
	if n, _ := plain.Exists(ctx, k).Result(); n != 0 {
		t.Fatal("a command failed before sending ran")
	}
	// A custom error.
	inj.Add(faultcmd.Rule{Action: faultcmd.FailBefore, Match: faultcmd.Match{Key: k}, Err: net.ErrClosed})
	if err := rdb.Set(ctx, k, "v", 0).Err(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("err = %v, want net.ErrClosed", err)
	}
}

func TestNthAndTimes(t *testing.T) {
	rdb, inj, _ := client(t)
	ctx := context.Background()
	k := key(t)
	inj.Add(faultcmd.Rule{Action: faultcmd.FailBefore, Match: faultcmd.Match{Cmd: "incr", Key: k}, Nth: 2, Times: 2})
	var got []bool
	for range 5 {
		got = append(got, rdb.Incr(ctx, k).Err() == nil)
	}
	if want := []bool{true, false, false, true, true}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("successes %v, want %v", got, want)
	}
	if v, _ := rdb.Get(ctx, k).Int(); v != 3 {
		t.Fatalf("counter %d, want 3", v)
	}
	// Negative Times: every match.
	inj.Clear()
	h := inj.Add(faultcmd.Rule{Action: faultcmd.FailBefore, Match: faultcmd.Match{Arg: "marker"}, Times: -1})
	for range 3 {
		if rdb.Set(ctx, k, "marker", 0).Err() == nil {
			t.Fatal("not failed")
		}
	}
	if h.Fired() != 3 {
		t.Fatalf("fired %d", h.Fired())
	}
	h.Remove()
	if err := rdb.Set(ctx, k, "marker", 0).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestScriptByNameSkipsNoscript(t *testing.T) {
	rdb, inj, plain := client(t)
	ctx := context.Background()
	k := key(t)
	src := fmt.Sprintf("-- %s\nreturn redis.call('INCR', KEYS[1])", k) // unique: not cached yet
	s := redis.NewScript(src)
	probe.NameScript("test_incr_"+k, s.Hash())
	inj.Add(faultcmd.Rule{Action: faultcmd.DropReply, Match: faultcmd.Match{Script: "test_incr_" + k, Key: k}})
	// EVALSHA gets NOSCRIPT (not counted), EVAL runs and its reply is dropped.
	err := s.Run(ctx, rdb, []string{k}).Err()
	if !errors.Is(err, faultcmd.ErrDropped) {
		t.Fatalf("err = %v, want dropped", err)
	}
	if v, _ := plain.Get(ctx, k).Int(); v != 1 {
		t.Fatalf("script ran %d times, want 1", v)
	}
	// By SHA, on EVALSHA now that the script is cached.
	inj.Add(faultcmd.Rule{Action: faultcmd.FailBefore, Match: faultcmd.Match{Script: s.Hash()}})
	if err := s.Run(ctx, rdb, []string{k}).Err(); !errors.Is(err, faultcmd.ErrFailed) {
		t.Fatalf("err = %v, want failed", err)
	}
	if v, _ := plain.Get(ctx, k).Int(); v != 1 {
		t.Fatalf("script ran %d times, want 1", v)
	}
}

// A function is matched by its script's name: its FCALL's "Function not
// found" is not counted (the caller loads the library and calls again),
// the FCALL that runs is.
func TestScriptByNameMatchesFcall(t *testing.T) {
	rdb, inj, plain := client(t)
	ctx := context.Background()
	k := key(t)
	lib := fmt.Sprintf("#!lua name=test_%d\nredis.register_function('test_incr_%d', function(KEYS) return redis.call('INCR', KEYS[1]) end)", seq.Add(1), seq.Load())
	fn := fmt.Sprintf("test_incr_%d", seq.Load())
	probe.NameScript("test_fincr_"+k, fn)
	inj.Add(faultcmd.Rule{Action: faultcmd.DropReply, Match: faultcmd.Match{Script: "test_fincr_" + k, Key: k}})
	if err := rdb.FCall(ctx, fn, []string{k}).Err(); err == nil || errors.Is(err, faultcmd.ErrDropped) {
		t.Fatalf("FCALL of a function not loaded: %v, want Function not found", err)
	}
	if err := plain.FunctionLoad(ctx, lib).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.FCall(ctx, fn, []string{k}).Err(); !errors.Is(err, faultcmd.ErrDropped) {
		t.Fatalf("err = %v, want dropped", err)
	}
	if v, _ := plain.Get(ctx, k).Int(); v != 1 {
		t.Fatalf("function ran %d times, want 1", v)
	}
	// By the function's name too.
	inj.Add(faultcmd.Rule{Action: faultcmd.FailBefore, Match: faultcmd.Match{Script: fn}})
	if err := rdb.FCall(ctx, fn, []string{k}).Err(); !errors.Is(err, faultcmd.ErrFailed) {
		t.Fatalf("err = %v, want failed", err)
	}
}

func TestDelay(t *testing.T) {
	rdb, inj, plain := client(t)
	k := key(t)
	inj.Add(faultcmd.Rule{Action: faultcmd.Delay, Delay: 50 * time.Millisecond, Match: faultcmd.Match{Key: k}})
	start := time.Now()
	if err := rdb.Set(context.Background(), k, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("returned after %v, before the delay", d)
	}
	// A context that ends during the delay: not sent.
	inj.Add(faultcmd.Rule{Action: faultcmd.Delay, Delay: time.Hour, Match: faultcmd.Match{Key: k}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := rdb.Set(ctx, k, "w", 0).Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if v, _ := plain.Get(context.Background(), k).Result(); v != "v" {
		t.Fatalf("GET = %q: the delayed command was sent", v)
	}
}

func TestHoldReorders(t *testing.T) {
	rdb, inj, plain := client(t)
	ctx := context.Background()
	k := key(t)
	h := inj.Add(faultcmd.Rule{Action: faultcmd.Hold,
		Match: faultcmd.Match{Cmd: "rpush", Key: k, Arg: "first"},
		Until: faultcmd.Match{Cmd: "rpush", Key: k, Arg: "second"}})
	done := make(chan error, 1)
	go func() { done <- rdb.RPush(ctx, k, "first").Err() }()
	<-h.FiredC() // "first" is held
	if err := rdb.RPush(ctx, k, "second").Err(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, _ := plain.LRange(ctx, k, 0, -1).Result(); fmt.Sprint(got) != "[second first]" {
		t.Fatalf("order %v, want [second first]", got)
	}
	// A hold nobody releases times out and sends.
	inj.Add(faultcmd.Rule{Action: faultcmd.Hold, HoldTimeout: 20 * time.Millisecond,
		Match: faultcmd.Match{Key: k}, Until: faultcmd.Match{Key: "never"}})
	if err := rdb.RPush(ctx, k, "third").Err(); err != nil {
		t.Fatal(err)
	}
	if n, _ := plain.LLen(ctx, k).Result(); n != 3 {
		t.Fatalf("len %d", n)
	}
}

func TestPipeline(t *testing.T) {
	rdb, inj, plain := client(t)
	ctx := context.Background()
	k := key(t)
	// Drop at the 2nd command: all three ran, replies 2 and 3 lost.
	inj.Add(faultcmd.Rule{Action: faultcmd.DropReply, Match: faultcmd.Match{Cmd: "incr", Key: k}, Nth: 2})
	cmds, _ := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for range 3 {
			p.Incr(ctx, k)
		}
		return nil
	})
	if cmds[0].Err() != nil || !errors.Is(cmds[1].Err(), faultcmd.ErrDropped) || !errors.Is(cmds[2].Err(), faultcmd.ErrDropped) {
		t.Fatalf("errors %v %v %v", cmds[0].Err(), cmds[1].Err(), cmds[2].Err())
	}
	if v, _ := plain.Get(ctx, k).Int(); v != 3 {
		t.Fatalf("counter %d, want 3", v)
	}
	// Fail before the 2nd: only the first is sent.
	inj.Clear()
	inj.Add(faultcmd.Rule{Action: faultcmd.FailBefore, Match: faultcmd.Match{Cmd: "incr", Key: k}, Nth: 2})
	cmds, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for range 3 {
			p.Incr(ctx, k)
		}
		return nil
	})
	if cmds[0].Err() != nil || !errors.Is(cmds[1].Err(), faultcmd.ErrFailed) || !errors.Is(cmds[2].Err(), faultcmd.ErrFailed) {
		t.Fatalf("errors %v %v %v", cmds[0].Err(), cmds[1].Err(), cmds[2].Err())
	}
	if v, _ := plain.Get(ctx, k).Int(); v != 4 {
		t.Fatalf("counter %d, want 4", v)
	}
}

func TestRandomIsSeeded(t *testing.T) {
	run := func() string {
		rdb, inj, _ := client(t)
		k := key(t)
		inj.SetRandom(&faultcmd.Random{Seed: 42, Match: faultcmd.Match{Key: k}, DropReply: 0.3, FailBefore: 0.3})
		var b strings.Builder
		for range 40 {
			err := rdb.Incr(context.Background(), k).Err()
			switch {
			case errors.Is(err, faultcmd.ErrDropped):
				b.WriteByte('d')
			case errors.Is(err, faultcmd.ErrFailed):
				b.WriteByte('f')
			case err == nil:
				b.WriteByte('.')
			default:
				t.Fatal(err)
			}
		}
		c := inj.Counts()
		if c[faultcmd.DropReply] == 0 || c[faultcmd.FailBefore] == 0 {
			t.Fatalf("counts %v", c)
		}
		return b.String()
	}
	a, b := run(), run()
	if a != b {
		t.Fatalf("same seed, different schedules:\n%s\n%s", a, b)
	}
}

func TestDialFailure(t *testing.T) {
	rdb, inj, _ := client(t)
	h := inj.Add(faultcmd.Rule{Action: faultcmd.FailBefore, Match: faultcmd.Match{Cmd: "dial"}, Err: errors.New("refused"), Times: -1})
	if err := rdb.Ping(context.Background()).Err(); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("err = %v", err)
	}
	h.Remove()
	// go-redis may fail fast for a moment after dial errors.
	deadline := time.Now().Add(5 * time.Second)
	for rdb.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatal("no connection after the rule was removed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestProbePoint(t *testing.T) {
	var got []string
	restore := probe.Set(func(name, key string) { got = append(got, name+"/"+key) })
	probe.Point(probe.AfterGrant, "k")
	restore()
	probe.Point(probe.AfterGrant, "k") // unset: nothing
	if fmt.Sprint(got) != "["+probe.AfterGrant+"/k]" {
		t.Fatalf("got %v", got)
	}
}

func TestLateLandsAfterTheCallerGaveUp(t *testing.T) {
	rdb, inj, plain := client(t)
	ctx := context.Background()
	k := key(t)
	obs := inj.Add(faultcmd.Rule{Action: faultcmd.Observe, Match: faultcmd.Match{Cmd: "set", Key: k}, Times: -1})
	inj.Add(faultcmd.Rule{Action: faultcmd.Late, Match: faultcmd.Match{Cmd: "set", Key: k, Arg: "late"},
		Until: faultcmd.Match{Cmd: "set", Key: k, Arg: "cleanup"}})
	if err := rdb.Set(ctx, k, "late", 0).Err(); !errors.Is(err, faultcmd.ErrDropped) {
		t.Fatalf("err = %v", err)
	}
	if n, _ := plain.Exists(ctx, k).Result(); n != 0 {
		t.Fatal("the late command ran at once")
	}
	if err := rdb.Set(ctx, k, "cleanup", 0).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if v, _ := plain.Get(ctx, k).Result(); v == "late" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the late command never landed")
		}
		time.Sleep(time.Millisecond)
	}
	if obs.Fired() != 2 {
		t.Fatalf("observer saw %d commands, want 2", obs.Fired())
	}
}

// An Observe rule's FiredC closes when the command is seen, before it is
// sent; DoneC once its reply arrived, when its effect is on the server.
func TestObserveDoneAfterTheEffect(t *testing.T) {
	for _, pipelined := range []bool{false, true} {
		t.Run(fmt.Sprint("pipeline=", pipelined), func(t *testing.T) {
			rdb, inj, plain := client(t)
			ctx := context.Background()
			k := key(t)
			obs := inj.Add(faultcmd.Rule{Action: faultcmd.Observe, Match: faultcmd.Match{Cmd: "set", Key: k}})
			inj.Add(faultcmd.Rule{Action: faultcmd.Hold, Match: faultcmd.Match{Cmd: "set", Key: k},
				Until: faultcmd.Match{Cmd: "ping", Arg: k}})
			done := make(chan error, 1)
			go func() {
				if pipelined {
					_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error { return p.Set(ctx, k, "v", 0).Err() })
					done <- err
					return
				}
				done <- rdb.Set(ctx, k, "v", 0).Err()
			}()
			<-obs.FiredC()
			select {
			case <-obs.DoneC():
				t.Fatal("DoneC closed while the command was held")
			case <-time.After(20 * time.Millisecond):
			}
			if n, _ := plain.Exists(ctx, k).Result(); n != 0 {
				t.Fatal("the held SET ran")
			}
			if err := rdb.Ping(ctx).Err(); err != nil { // not matched: Arg k is not a PING argument
				t.Fatal(err)
			}
			if err := rdb.Do(ctx, "ping", k).Err(); err != nil { // releases the hold
				t.Fatal(err)
			}
			<-obs.DoneC()
			if v, _ := plain.Get(ctx, k).Result(); v != "v" {
				t.Fatalf("GET = %q once DoneC closed, want the SET's effect", v)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}
