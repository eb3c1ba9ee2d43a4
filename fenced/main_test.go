package fenced_test

import (
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

// srv is the redis-server shared by the package's tests.
var srv *redistest.Server

// redisAddr is srv's address; the Examples connect to it.
var redisAddr string

// TestMain starts the shared server and, after the tests, checks that no
// goroutine (of a dlock Client the tests started) is left running.
func TestMain(m *testing.M) {
	os.Exit(redistest.RunShared(m, "fenced", func(s *redistest.Server) { srv, redisAddr = s, s.Addr() }))
}

var keySeq atomic.Int64

// key returns a key no other test uses.
func key(t testing.TB) string {
	return fmt.Sprintf("%s#%d", t.Name(), keySeq.Add(1))
}
