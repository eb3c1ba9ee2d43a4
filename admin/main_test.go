package admin_test

import (
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/admin"
	"github.com/dlock-go/dlock/internal/faultcmd"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

var (
	srv       *redistest.Server
	redisAddr string
)

func TestMain(m *testing.M) {
	os.Exit(redistest.RunShared(m, "admin", func(s *redistest.Server) { srv, redisAddr = s, s.Addr() }))
}

// newClient returns a go-redis client to srv, a dlock Client over it and
// the admin Client of its locks, closed at the end of the test.
func newClient(t testing.TB, opts dlock.Options) (*dlock.Client, *admin.Client, *redis.Client) {
	t.Helper()
	return newClientOn(t, srv.NewClient(), opts)
}

func newClientOn(t testing.TB, rdb *redis.Client, opts dlock.Options) (*dlock.Client, *admin.Client, *redis.Client) {
	t.Helper()
	c, err := dlock.New(rdb, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		_ = rdb.Close()
	})
	o := c.Options()
	adm, err := admin.New(rdb, admin.Options{Prefix: o.Prefix, PickupTimeout: o.PickupTimeout})
	if err != nil {
		t.Fatal(err)
	}
	return c, adm, rdb
}

// faultyClient is newClient over a go-redis client whose commands inj
// changes.
func faultyClient(t *testing.T, opts dlock.Options) (*dlock.Client, *admin.Client, *faultcmd.Injector) {
	t.Helper()
	rdb := srv.NewClient()
	inj := faultcmd.New()
	rdb.AddHook(inj)
	c, adm, _ := newClientOn(t, rdb, opts)
	t.Cleanup(func() {
		if t.Failed() {
			for _, e := range inj.Log() {
				t.Log("fault:", e)
			}
		}
	})
	return c, adm, inj
}

var keySeq atomic.Int64

// key returns a key no other test uses.
func key(t testing.TB) string {
	return fmt.Sprintf("%s#%d", t.Name(), keySeq.Add(1))
}
