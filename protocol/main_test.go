package protocol_test

import (
	"os"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

// srv is the redis-server shared by the package's tests and Examples.
var (
	srv       *redistest.Server
	redisAddr string
)

func TestMain(m *testing.M) {
	os.Exit(redistest.RunShared(m, "protocol", func(s *redistest.Server) { srv, redisAddr = s, s.Addr() }))
}
