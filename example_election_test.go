package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/fenced"
)

func ExampleClient_Election() {
	c, _, done := exampleClient()
	defer done()
	// A leader that dies without resigning is replaced within the TTL.
	e := c.Election("example:scheduler", dlock.ElectionOptions{TTL: 5 * time.Second})
	fmt.Println(e.Name())
	// Output: example:scheduler
}

func ExampleElection_Campaign() {
	ctx := context.Background()
	c, _, done := exampleClient()
	defer done()
	e := c.Election("example:campaign", dlock.ElectionOptions{})
	// Blocks until elected (candidates are elected in the order they came).
	l, err := e.Campaign(ctx, "host-a:8080")
	if err != nil {
		panic(err)
	}
	defer l.Resign(ctx)
	fmt.Println("leading:", l.Err() == nil, "term > 0:", l.Term() > 0)
	select {
	case <-l.Done(): // closed when the leadership is lost (or resigned)
	default:
	}
	// Output: leading: true term > 0: true
}

func ExampleElection_Leader() {
	ctx := context.Background()
	c, _, done := exampleClient()
	defer done()
	e := c.Election("example:leader", dlock.ElectionOptions{})
	if _, err := e.Leader(ctx); errors.Is(err, dlock.ErrNoLeader) {
		fmt.Println("no leader yet")
	}
	l, _ := e.Campaign(ctx, "host-b:8080")
	defer l.Resign(ctx)
	li, err := e.Leader(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(li.Value, li.Term == l.Term(), time.Since(li.Since) < time.Minute)
	// Output:
	// no leader yet
	// host-b:8080 true true
}

func ExampleElection_Observe() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, _, done := exampleClient()
	defer done()
	e := c.Election("example:observe", dlock.ElectionOptions{PollInterval: 100 * time.Millisecond})
	// Every leader, in order, with increasing terms, and NoLeader when
	// nobody leads (first, if nobody does yet); closed when ctx ends.
	leaders := e.Observe(ctx)
	show := func(li dlock.LeaderInfo) {
		if li.NoLeader {
			fmt.Println("no leader")
			return
		}
		fmt.Println("leader:", li.Value)
	}
	show(<-leaders) // nobody has campaigned yet
	for _, who := range []string{"first", "second"} {
		l, err := e.Campaign(ctx, who)
		if err != nil {
			panic(err)
		}
		show(<-leaders)
		_ = l.Resign(ctx)
		show(<-leaders) // within about PollInterval
	}
	// Output:
	// no leader
	// leader: first
	// no leader
	// leader: second
	// no leader
}

func ExampleLeadership_Resign() {
	ctx := context.Background()
	c, _, done := exampleClient()
	defer done()
	e := c.Election("example:resign", dlock.ElectionOptions{TTL: time.Minute})
	a, _ := e.Campaign(ctx, "a")
	next := make(chan *dlock.Leadership)
	go func() {
		b, _ := e.Campaign(ctx, "b") // queued behind a
		next <- b
	}()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	// The lock goes to b at once: no waiting for a's one-minute lease.
	if err := a.Resign(ctx); err != nil {
		panic(err)
	}
	b := <-next
	fmt.Println("b elected within a second:", time.Since(start) < time.Second, "higher term:", b.Term() > a.Term())
	_ = b.Resign(ctx)
	// Output: b elected within a second: true higher term: true
}

func ExampleLeadership_Proclaim() {
	ctx := context.Background()
	c, _, done := exampleClient()
	defer done()
	e := c.Election("example:proclaim", dlock.ElectionOptions{})
	l, _ := e.Campaign(ctx, "v1")
	defer l.Resign(ctx)
	if err := l.Proclaim(ctx, "v2"); err != nil {
		panic(err)
	}
	li, _ := e.Leader(ctx)
	fmt.Println(li.Value, li.Rev)
	// Output: v2 2
}

// ExampleElection_Run is README.md's leader example (TestReadmeExamples).
func ExampleElection_Run() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	locks, rdb, done := exampleClient()
	defer done()

	// README begin
	// Run calls OnStartedLeading while this process leads.
	e := locks.Election("scheduler", dlock.ElectionOptions{})
	if err := e.Run(ctx, "worker-1", dlock.RunConfig{
		OnStartedLeading: func(ctx context.Context, l *dlock.Leadership) {
			// ctx is cancelled if the leadership is lost. The term is the fence:
			// a deposed leader's late write is refused once a later leader wrote.
			err := fenced.Set(ctx, rdb, "schedule", l.Term(), l.Lock().Token(), "plan of worker-1")
			fmt.Println("leading; fenced write:", err)
		}, // returning resigns
	}); err != nil { // the loss error if the leadership was lost
		log.Fatal(err)
	}
	// README end

	// Output:
	// leading; fenced write: <nil>
}
