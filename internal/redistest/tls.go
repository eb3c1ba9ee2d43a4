package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// TLSFiles are the PEM files of a server started with Config.TLS: a CA
// made for it, the server's certificate (for 127.0.0.1 and localhost,
// signed by the CA) and a client certificate signed by the same CA.
type TLSFiles struct {
	CA                    string // the CA certificate: trust it to verify the server
	ServerCert, ServerKey string
	ClientCert, ClientKey string // present them when the server asks (Config.TLSAuthClients)
	ServerName            string // a name in the server certificate other than the address: "redis.test"
}

// tlsArgs are the redis-server arguments of a TLS port with files f.
func tlsArgs(port int, f *TLSFiles, authClients bool) []string {
	auth := "no"
	if authClients {
		auth = "yes"
	}
	return []string{
		"--tls-port", strconv.Itoa(port),
		"--tls-cert-file", f.ServerCert,
		"--tls-key-file", f.ServerKey,
		"--tls-ca-cert-file", f.CA,
		"--tls-auth-clients", auth,
	}
}

// makeTLSFiles writes a fresh CA, server and client certificate into dir.
// Only crypto/x509: no openssl needed.
func makeTLSFiles(dir string) (*TLSFiles, error) {
	f := &TLSFiles{
		CA:         filepath.Join(dir, "ca.crt"),
		ServerCert: filepath.Join(dir, "server.crt"), ServerKey: filepath.Join(dir, "server.key"),
		ClientCert: filepath.Join(dir, "client.crt"), ClientKey: filepath.Join(dir, "client.key"),
		ServerName: "redis.test",
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redistest CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	if err := writePEM(f.CA, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, certPath, keyPath string) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		}
		if usage == x509.ExtKeyUsageServerAuth {
			tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
			tmpl.DNSNames = []string{"localhost", f.ServerName}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return err
		}
		if err := writePEM(certPath, "CERTIFICATE", der); err != nil {
			return err
		}
		return writePEM(keyPath, "EC PRIVATE KEY", kder)
	}
	if err := leaf(2, "redistest server", x509.ExtKeyUsageServerAuth, f.ServerCert, f.ServerKey); err != nil {
		return nil, fmt.Errorf("redistest: server certificate: %w", err)
	}
	if err := leaf(3, "redistest client", x509.ExtKeyUsageClientAuth, f.ClientCert, f.ClientKey); err != nil {
		return nil, fmt.Errorf("redistest: client certificate: %w", err)
	}
	return f, nil
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// TLSAddr returns the TLS address, "127.0.0.1:tlsport" ("" without
// Config.TLS).
func (s *Server) TLSAddr() string {
	if s.TLSPort == 0 {
		return ""
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.TLSPort))
}
