package redistest

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// RunShared is the TestMain of a package whose tests share one server:
// it starts the server, hands it to use, runs the tests, stops the server
// and returns the exit code for os.Exit. who names the package in the
// error printed when redis-server cannot be started.
//
//	func TestMain(m *testing.M) {
//		os.Exit(redistest.RunShared(m, "legacy", func(s *redistest.Server) { srv = s }))
//	}
func RunShared(m *testing.M, who string, use func(*Server)) int {
	s, err := StartMain(Config{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s tests need redis-server: %v\n", who, err)
		return 1
	}
	use(s)
	code := m.Run()
	_ = s.Close()
	if code == 0 {
		code = CheckLeaks(who, 0)
	}
	return code
}

// CheckLeaks reports goroutines still running after a package's tests
// and returns 1 if there are any, 0 if not. It looks again for a moment
// (goroutines told to stop take a little while to finish), or for within
// if longer: work a package hands to background goroutines on purpose,
// bounded in time, must end by then. Packages whose TestMain does not use
// RunShared call it after m.Run.
func CheckLeaks(who string, within time.Duration) int {
	ignore := []goleak.Option{
		// The spawner thread lives as long as the process, on purpose
		// (see startOnSpawnerThread).
		goleak.IgnoreTopFunction("github.com/dlock-go/dlock/internal/redistest.startOnSpawnerThread.func1.1"),
		// A go-redis client's own housekeeping: the check is for what
		// dlock starts; the go-redis clients belong to the tests (which
		// do not all close them: the process ends).
		goleak.IgnoreTopFunction("github.com/redis/go-redis/v9/maintnotifications.(*CircuitBreakerManager).cleanupLoop"),
	}
	end := time.Now().Add(within)
	for {
		err := goleak.Find(ignore...) // itself retries for about a second
		if err == nil {
			return 0
		}
		if time.Now().After(end) {
			fmt.Fprintf(os.Stderr, "%s tests leaked goroutines: %v\n", who, err)
			return 1
		}
		time.Sleep(200 * time.Millisecond)
	}
}
