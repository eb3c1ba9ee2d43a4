package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// srv is the redis-server the package's tests share.
var srv *redistest.Server

func TestMain(m *testing.M) {
	os.Exit(redistest.RunShared(m, "notify", func(s *redistest.Server) { srv = s }))
}

var (
	errClosed  = errors.New("closed")
	errRefused = errors.New("refused")
	seq        atomic.Int64
)

// testNotifier is a Notifier over rdb and what its callbacks saw.
type testNotifier struct {
	*Notifier
	redials atomic.Int64
}

// newNotifier returns a Notifier over rdb, closed (with rdb) at the end of
// the test. Its own channel and the channels the test names come from
// name, so tests sharing the server do not hear each other.
func newNotifier(t *testing.T, rdb *redis.Client) *testNotifier {
	t.Helper()
	closing := make(chan struct{})
	tn := &testNotifier{}
	tn.Notifier = New(Config{
		Redis: rdb, Own: name(t, "client"), Logger: slog.New(slog.DiscardHandler),
		Closing: closing, Closed: errClosed,
		Refused: func(err error) error {
			var re redis.Error
			if errors.As(err, &re) && strings.HasPrefix(re.Error(), "NOPERM") {
				return fmt.Errorf("%w: %w", errRefused, err)
			}
			return nil
		},
		Redialed: func() { tn.redials.Add(1) },
		IsToken:  func(s string) bool { return len(s) == 22 },
	})
	t.Cleanup(func() {
		close(closing)
		tn.Close()
		_ = rdb.Close()
	})
	return tn
}

func name(t *testing.T, what string) string {
	return fmt.Sprintf("notify-test:%s:%s:%d", t.Name(), what, seq.Add(1))
}

func newWaiter(channel string) *Waiter {
	return &Waiter{Channel: channel, Wake: make(chan struct{}, 1)}
}

// woken reports whether w is woken within d.
func woken(w *Waiter, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.Wake:
		return true
	case <-t.C:
		return false
	}
}

// confirmedAll waits until Redis confirmed every SUBSCRIBE of n: a
// message published before could be missed.
func confirmedAll(t *testing.T, n *testNotifier) {
	t.Helper()
	for end := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		n.mu.Lock()
		left := len(n.pending)
		n.mu.Unlock()
		if left == 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatal("subscriptions not confirmed")
		}
	}
}

func publish(t *testing.T, channel, msg string) {
	t.Helper()
	rdb := srv.NewClient()
	defer rdb.Close()
	if err := rdb.Publish(context.Background(), channel, msg).Err(); err != nil {
		t.Fatal(err)
	}
}

// A message on a key's wake-up channel wakes one listening waiter, the
// oldest, and every watcher; a waiter that leaves without using its
// wake-up passes it on to the next.
func TestMessageWakesOneListener(t *testing.T) {
	n := newNotifier(t, srv.NewClient())
	ctx := context.Background()
	ch := name(t, "wake")
	a, b := newWaiter(ch), newWaiter(ch)
	for _, w := range []*Waiter{a, b} {
		if err := n.Subscribe(ctx, w); err != nil {
			t.Fatal(err)
		}
		defer n.Unsubscribe(w)
	}
	watch, err := n.Watch(ctx, ch)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Unsubscribe(watch)
	confirmedAll(t, n)
	publish(t, ch, "")
	if !woken(a, time.Minute) {
		t.Fatal("the oldest waiter was not woken")
	}
	if !woken(watch, time.Minute) {
		t.Fatal("the watcher was not woken")
	}
	if woken(b, 100*time.Millisecond) {
		t.Fatal("one message woke both waiters")
	}
	if handed, granted := a.Woken(); !handed || granted {
		t.Fatalf("woken by a release message: handed %v, granted %v", handed, granted)
	}
	a.Signal() // a leaves holding its wake-up
	n.PassOn(a)
	if !woken(b, time.Minute) {
		t.Fatal("the wake-up a left with was not passed on")
	}
}

// A hand-off message (handoffID of a queued waiter's token) on the own
// channel wakes that waiter, marked granted; a probe payload wakes
// nobody.
func TestHandoffWakesQueuedWaiter(t *testing.T) {
	n := newNotifier(t, srv.NewClient())
	ctx := context.Background()
	w := newWaiter(token())
	if err := n.Queue(ctx, w); err != nil {
		t.Fatal(err)
	}
	defer n.Dequeue(w)
	if !n.OwnSubscribed() {
		t.Fatal("Queue did not subscribe the own channel")
	}
	confirmedAll(t, n)
	publish(t, n.Own(), ProbePrefix+"1")
	if woken(w, 100*time.Millisecond) {
		t.Fatal("a probe payload woke a queued waiter")
	}
	publish(t, n.Own(), handoffID(w.Channel))
	if !woken(w, time.Minute) {
		t.Fatal("the hand-off did not wake its waiter")
	}
	if handed, granted := w.Woken(); !handed || !granted {
		t.Fatalf("woken by its hand-off: handed %v, granted %v", handed, granted)
	}
}

// probeHook answers the PUBLISHes of probes without sending them while
// swallow is set: the subscription looks alive but hears nothing.
type probeHook struct{ swallow atomic.Bool }

func (h *probeHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *probeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *probeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a := cmd.Args()
		if len(a) == 3 && strings.EqualFold(cmd.Name(), "publish") && h.swallow.Load() {
			if p, _ := a[2].(string); strings.HasPrefix(p, ProbePrefix) {
				cmd.(*redis.IntCmd).SetVal(0)
				return nil
			}
		}
		return next(ctx, cmd)
	}
}

// A probe that never comes back makes the notifier replace its
// connection (Redialed), wake its waiters (not as a hand-off), and
// subscribe again: the next hand-off is heard on the new connection.
func TestStaleSubscriptionRedialed(t *testing.T) {
	rdb := srv.NewClient()
	h := &probeHook{}
	rdb.AddHook(h)
	n := newNotifier(t, rdb)
	const every = 100 * time.Millisecond
	n.SetProbe(every, every)
	ctx := context.Background()
	w := newWaiter(token())
	if err := n.Queue(ctx, w); err != nil {
		t.Fatal(err)
	}
	defer n.Dequeue(w)
	h.swallow.Store(true)
	if !woken(w, time.Minute) {
		t.Fatal("no redial woke the waiter")
	}
	if n.redials.Load() == 0 {
		t.Fatal("the waiter was woken without a redial")
	}
	if handed, granted := w.Woken(); !handed || granted {
		t.Fatalf("woken by a redial: handed %v, granted %v", handed, granted)
	}
	h.swallow.Store(false)
	// The last redial's subscription may still be unconfirmed: publish
	// until the hand-off is heard.
	for end := time.Now().Add(time.Minute); ; {
		publish(t, n.Own(), handoffID(w.Channel))
		if woken(w, 100*time.Millisecond) {
			if _, granted := w.Woken(); granted {
				break
			}
		}
		if time.Now().After(end) {
			t.Fatal("the hand-off was not heard on the new connection")
		}
	}
}

// A SUBSCRIBE that Redis refuses by ACL makes Queue return what
// Config.Refused made of the refusal, and Refusal report it from then on.
func TestRefusedSubscription(t *testing.T) {
	ctx := context.Background()
	admin := srv.NewClient()
	defer admin.Close()
	user := fmt.Sprintf("notify-%d", seq.Add(1))
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "reset", "on", ">pw", "~*", "resetchannels", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	defer admin.Do(ctx, "ACL", "DELUSER", user)
	n := newNotifier(t, redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: user, Password: "pw"}))
	w := newWaiter(token())
	err := n.Queue(ctx, w)
	if err == nil {
		// The refusal came after Queue's wait for the confirmation.
		n.Dequeue(w)
		for end := time.Now().Add(time.Minute); n.Refusal() == nil && time.Now().Before(end); {
			time.Sleep(10 * time.Millisecond)
		}
		err = n.Refusal()
	}
	if !errors.Is(err, errRefused) {
		t.Fatalf("Queue with no channel rights: %v, want the refusal", err)
	}
	if err := n.Queue(ctx, newWaiter(token())); !errors.Is(err, errRefused) {
		t.Fatalf("Queue after the refusal: %v, want the refusal", err)
	}
}

// After Close, registering a waiter returns Config.Closed.
func TestRegisterAfterClose(t *testing.T) {
	n := newNotifier(t, srv.NewClient())
	ctx := context.Background()
	if err := n.Subscribe(ctx, newWaiter(name(t, "wake"))); err != nil {
		t.Fatal(err)
	}
	n.Close()
	if err := n.Queue(ctx, newWaiter(token())); !errors.Is(err, errClosed) {
		t.Fatalf("Queue after Close: %v", err)
	}
	if err := n.Subscribe(ctx, newWaiter(name(t, "wake"))); !errors.Is(err, errClosed) {
		t.Fatalf("Subscribe after Close: %v", err)
	}
	if _, err := n.Watch(ctx, name(t, "wake")); !errors.Is(err, errClosed) {
		t.Fatalf("Watch after Close: %v", err)
	}
}

// dialHook stalls every dial while stall is set, until release is closed
// or the dial's context ends.
type dialHook struct {
	stall   atomic.Bool
	release chan struct{}
}

func (h *dialHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if h.stall.Load() {
			select {
			case <-h.release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return next(ctx, network, addr)
	}
}
func (h *dialHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *dialHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Registering a waiter returns by its context while the pub/sub
// connection cannot be dialled: the SUBSCRIBE is sent in the background,
// never by the caller nor under the lock every waiter shares. Queued
// waiters (the own channel) and listening ones alike.
func TestRegisterNotHeldUpByDial(t *testing.T) {
	rdb := srv.NewClient()
	h := &dialHook{release: make(chan struct{})}
	h.stall.Store(true)
	rdb.AddHook(h)
	n := newNotifier(t, rdb)
	t.Cleanup(func() { close(h.release) }) // before n closes
	for _, tc := range []struct {
		name     string
		register func(context.Context) error
	}{
		{"queued", func(ctx context.Context) error { return n.Queue(ctx, newWaiter(token())) }},
		{"listening", func(ctx context.Context) error { return n.Subscribe(ctx, newWaiter(name(t, "wake"))) }},
		{"second listener", func(ctx context.Context) error { return n.Subscribe(ctx, newWaiter(name(t, "wake"))) }},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		done := make(chan error, 1)
		go func() { done <- tc.register(ctx) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: registering waits for the pub/sub dial", tc.name)
		}
		cancel()
	}
}
