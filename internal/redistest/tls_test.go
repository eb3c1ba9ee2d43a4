package redistest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestTLS(t *testing.T) {
	t.Parallel()
	s := Start(t, Config{TLS: true, TLSAuthClients: true})
	pem, err := os.ReadFile(s.TLS.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cert, err := tls.LoadX509KeyPair(s.TLS.ClientCert, s.TLS.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: s.TLSAddr(), MaxRetries: -1,
		TLSConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, ServerName: s.TLS.ServerName}})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING over TLS with the client certificate: %v", err)
	}
	// Without the client certificate the server refuses.
	c2 := redis.NewClient(&redis.Options{Addr: s.TLSAddr(), MaxRetries: -1,
		TLSConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}})
	defer c2.Close()
	if err := c2.Ping(ctx).Err(); err == nil {
		t.Fatal("PING over TLS without a client certificate succeeded; want refused")
	}
}
