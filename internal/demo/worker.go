package demo

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// A worker is a separate process, like a separate application server, with
// its own connections and its own dlock Client. It connects, prints
// "ready", waits for "go" on stdin, runs its buyers, and prints one JSON
// result line. An election worker prints its events instead (see
// electionWorker).

var (
	//go:embed scripts/sale.lua
	saleLua string
	//go:embed scripts/limit.lua
	limitLua string

	// saleScript is the atomic mode of the flash sale.
	saleScript = redis.NewScript(saleLua)
	// limitScript is the atomic mode of the rate limit.
	limitScript = redis.NewScript(limitLua)
)

// ErrAbandoned is the error of Work when the demo that started the worker
// went away before telling it to go.
var ErrAbandoned = errors.New("demo worker: the demo went away")

// Work is the part of one worker process: specJSON is what Env.Command was
// given, rdb the worker's own connection to the demo's Redis. It reads
// the demo's orders on stdin and writes its reports on stdout. Its errors:
// ErrBadSpec, ErrAbandoned, or the reason it could not start.
func Work(ctx context.Context, rdb redis.UniversalClient, specJSON string, stdin io.Reader, stdout io.Writer) error {
	var s spec
	if err := json.Unmarshal([]byte(specJSON), &s); err != nil {
		return fmt.Errorf("%w: %v", ErrBadSpec, err)
	}
	if s.TTL <= 0 {
		return fmt.Errorf("%w: ttl %v", ErrBadSpec, s.TTL)
	}
	if s.Scenario == "election" {
		if s.Act <= 0 || s.ID == "" || s.Name == "" {
			return fmt.Errorf("%w: election needs id, name and act > 0", ErrBadSpec)
		}
		return electionWorker(ctx, rdb, s, stdin, stdout)
	}
	if s.Buyers < 1 {
		return fmt.Errorf("%w: buyers %d", ErrBadSpec, s.Buyers)
	}
	c, err := dlock.New(rdb, dlock.Options{Prefix: s.NS, TTL: s.TTL, AllowEviction: s.AllowEviction})
	if err != nil {
		return err
	}
	defer c.Close()
	w := &worker{spec: s, rdb: rdb, c: c}
	w.customers.Store(int64(s.Customers))
	buy, err := w.buyer()
	if err != nil {
		return err
	}
	// Load the scripts now so the timed part does not pay for it.
	_ = saleScript.Load(ctx, rdb).Err()
	_ = limitScript.Load(ctx, rdb).Err()

	fmt.Fprintln(stdout, "ready")
	line, err := bufio.NewReader(stdin).ReadString('\n')
	if err != nil || line != "go\n" {
		return ErrAbandoned
	}

	var wg sync.WaitGroup
	results := make([]result, s.Buyers)
	errs := make([]error, s.Buyers)
	for i := range s.Buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i].PerIP = map[string]int64{}
			errs[i] = buy(ctx, rand.New(rand.NewPCG(rand.Uint64(), uint64(i))), &results[i])
		}()
	}
	wg.Wait()

	var total result
	total.PerIP = map[string]int64{}
	for i, r := range results {
		total.Ops += r.Ops
		total.Requests += r.Requests
		total.IDs = append(total.IDs, r.IDs...)
		for ip, n := range r.PerIP {
			total.PerIP[ip] += n
		}
		if errs[i] != nil && total.Err == "" {
			total.Err = errs[i].Error()
		}
	}
	total.Waits = c.Stats().Waits
	out, _ := json.Marshal(total)
	fmt.Fprintln(stdout, string(out))
	return nil
}

type worker struct {
	spec      spec
	rdb       redis.UniversalClient
	c         *dlock.Client
	customers atomic.Int64 // flash sale: customers of this worker not served yet
}

// nextCustomer takes the next customer of this worker, if any is left.
func (w *worker) nextCustomer() bool { return w.customers.Add(-1) >= 0 }

// buyFunc is one buyer (client) of a worker: it runs until its part of the
// scenario is done and adds what it did to res.
type buyFunc func(ctx context.Context, rnd *rand.Rand, res *result) error

func (w *worker) work() {
	if w.spec.Work > 0 {
		time.Sleep(w.spec.Work)
	}
}

// locked runs fn while holding the lock on key.
func (w *worker) locked(ctx context.Context, key string, fn func() error) error {
	lk, err := w.c.Lock(ctx, lockKeyOf(key))
	if err != nil {
		return err
	}
	return errors.Join(fn(), lk.Unlock(ctx))
}

func (w *worker) buyer() (buyFunc, error) {
	s := w.spec
	switch s.Scenario + "/" + s.Mode {
	case "flashsale/none", "flashsale/lock", "flashsale/atomic":
		return func(ctx context.Context, _ *rand.Rand, res *result) error {
			key := stockKey(s.NS, s.Mode)
			buy := func() (ok bool, err error) {
				switch s.Mode {
				case "none":
					return w.sellOnce(ctx, key)
				case "lock":
					err = w.locked(ctx, key, func() (err error) {
						ok, err = w.sellOnce(ctx, key)
						return err
					})
					return ok, err
				}
				n, err := saleScript.Run(ctx, w.rdb, []string{key}).Int64()
				return n == 1, err
			}
			soldOut := false
			for w.nextCustomer() {
				if soldOut {
					continue // this handler saw the stock at 0: no more calls
				}
				ok, err := buy()
				if err != nil {
					return err
				}
				if ok {
					res.Ops++
				} else {
					soldOut = true
				}
			}
			return nil
		}, nil
	case "flashsale/segmented":
		if s.Segments < 1 {
			return nil, fmt.Errorf("%w: segments %d", ErrBadSpec, s.Segments)
		}
		return w.segmentedBuyer, nil
	case "ids/none", "ids/lock":
		return func(ctx context.Context, _ *rand.Rand, res *result) error {
			key := idKey(s.NS, s.Mode)
			for range s.IDs {
				var id int64
				next := func() (err error) {
					id, err = w.nextID(ctx, key)
					return err
				}
				var err error
				if s.Mode == "lock" {
					err = w.locked(ctx, key, next)
				} else {
					err = next()
				}
				if err != nil {
					return err
				}
				res.IDs = append(res.IDs, id)
				res.Ops++
			}
			return nil
		}, nil
	case "ids/atomic":
		return func(ctx context.Context, _ *rand.Rand, res *result) error {
			for range s.IDs {
				id, err := w.rdb.Incr(ctx, idKey(s.NS, s.Mode)).Result()
				if err != nil {
					return err
				}
				res.IDs = append(res.IDs, id)
				res.Ops++
			}
			return nil
		}, nil
	case "ratelimit/none", "ratelimit/lock", "ratelimit/atomic":
		if s.IPs < 1 {
			return nil, fmt.Errorf("%w: ips %d", ErrBadSpec, s.IPs)
		}
		return func(ctx context.Context, rnd *rand.Rand, res *result) error {
			off := rnd.IntN(s.IPs)
			for r := range s.Requests {
				ip := ipName((off + r) % s.IPs)
				key := rateKey(s.NS, s.Mode, ip)
				var allowed bool
				var err error
				switch s.Mode {
				case "none":
					allowed, err = w.admit(ctx, key)
				case "lock":
					err = w.locked(ctx, key, func() (err error) {
						allowed, err = w.admit(ctx, key)
						return err
					})
				default:
					var n int64
					n, err = limitScript.Run(ctx, w.rdb, []string{key}, s.Limit, 60).Int64()
					allowed = n == 1
				}
				if err != nil {
					return err
				}
				res.Requests++
				if allowed {
					res.Ops++
					res.PerIP[ip]++
				}
			}
			return nil
		}, nil
	}
	return nil, fmt.Errorf("%w: unknown scenario/mode %s/%s", ErrBadSpec, s.Scenario, s.Mode)
}

// sellOnce is the classic read-check-write: read the stock, and if there is
// some, write back one less. It reports whether it sold one.
func (w *worker) sellOnce(ctx context.Context, key string) (bool, error) {
	n, err := w.rdb.Get(ctx, key).Int64()
	if err != nil {
		return false, err
	}
	if n <= 0 {
		return false, nil
	}
	w.work()
	return true, w.rdb.Set(ctx, key, n-1, 0).Err()
}

// nextID reads the last id and writes back the next, which it returns.
func (w *worker) nextID(ctx context.Context, key string) (int64, error) {
	n, err := w.rdb.Get(ctx, key).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	w.work()
	return n + 1, w.rdb.Set(ctx, key, n+1, 0).Err()
}

// admit is a fixed-window rate limit by read-check-write.
func (w *worker) admit(ctx context.Context, key string) (bool, error) {
	n, err := w.rdb.Get(ctx, key).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return false, err
	}
	if n >= int64(w.spec.Limit) {
		return false, nil
	}
	w.work()
	return true, w.rdb.Set(ctx, key, n+1, time.Minute).Err()
}

// segmentedBuyer serves customers from S segments of the stock, each with
// its own lock (a segmented lock, 分段锁). For each customer it tries a random
// segment that still has stock, and if that lock is busy the next ones,
// without waiting; only when all are busy does it wait, for the first. A
// segment found empty is not tried again by this handler.
func (w *worker) segmentedBuyer(ctx context.Context, rnd *rand.Rand, res *result) error {
	s := w.spec
	empty := make([]bool, s.Segments)
	left := s.Segments
	for w.nextCustomer() {
		for left > 0 {
			seg, sold, err := w.buyFromSegments(ctx, rnd, empty, left)
			if err != nil {
				return err
			}
			if sold {
				res.Ops++
				break
			}
			empty[seg] = true
			left--
		}
	}
	return nil
}

// buyFromSegments makes one purchase attempt on some segment that is not
// known to be empty (left of them), and reports which segment it used and
// whether it sold an item.
func (w *worker) buyFromSegments(ctx context.Context, rnd *rand.Rand, empty []bool, left int) (int, bool, error) {
	s := w.spec
	// The k-th segment that still has stock.
	k, first := rnd.IntN(left), 0
	for i := range empty {
		if !empty[i] {
			if k == 0 {
				first = i
				break
			}
			k--
		}
	}
	var lk *dlock.Lock
	seg := first
	for i := range s.Segments {
		j := (first + i) % s.Segments
		if empty[j] {
			continue
		}
		l, err := w.c.TryLock(ctx, lockKeyOf(segmentKey(s.NS, s.Mode, j)))
		if errors.Is(err, dlock.ErrNotAcquired) {
			continue
		}
		if err != nil {
			return 0, false, err
		}
		lk, seg = l, j
		break
	}
	if lk == nil { // every segment busy: wait for the first choice
		l, err := w.c.Lock(ctx, lockKeyOf(segmentKey(s.NS, s.Mode, first)))
		if err != nil {
			return 0, false, err
		}
		lk, seg = l, first
	}
	var sold bool
	err := errors.Join(func() (err error) {
		sold, err = w.sellOnce(ctx, segmentKey(s.NS, s.Mode, seg))
		return err
	}(), lk.Unlock(ctx))
	return seg, sold, err
}
