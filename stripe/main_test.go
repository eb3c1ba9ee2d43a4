package stripe_test

import (
	"os"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

// redisAddr is the address of the redis-server the Examples lock on.
var redisAddr string

// TestMain starts the server the Examples use and, after the tests,
// checks that no goroutine (of a dlock Client they started) is left
// running.
func TestMain(m *testing.M) {
	os.Exit(redistest.RunShared(m, "stripe", func(s *redistest.Server) { redisAddr = s.Addr() }))
}
