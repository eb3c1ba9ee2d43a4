package redistest

import (
	"fmt"
	"os"
	"testing"
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
	defer s.Close()
	use(s)
	return m.Run()
}
