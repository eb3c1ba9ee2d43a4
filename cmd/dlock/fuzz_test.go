package main

import (
	"fmt"
	"strings"
	"testing"
)

// Fuzz targets of the URL code. `go test` runs the seed corpora as
// ordinary tests; `go test -run '^$' -fuzz FuzzX -fuzztime 30s` explores.

var urlSeeds = []string{
	"redis://127.0.0.1:6379/0",
	"rediss://user:s3cret-Pa55@example.com:6380/2?dial_timeout=1s",
	"redis://:pw@h/0?master_name=m",
	"redis+sentinel://h1:26379,h2:26379/0?master_name=mymaster&password=pw4567",
	"rediss+sentinel://u:pass@h1/1?master_name=m&sentinel_password=spw1234",
	"redis+cluster://:clusterpw@h1:7000,h2:7001?read_only=true",
	"REDIS+CLUSTER://H1:7000",
	"unix:///tmp/redis.sock?db=3",
	"unix+cluster:///tmp/s",
	"redis://u:ab/cd@127.0.0.1:6390/0",
	"redis://u:p@ss@host:1/0",
	"redis://u:%zz@h/0",
	"redis://[::1]:6379/0",
	"redis://h:notaport/0",
	"redis://h/zero",
	"redis://h/0?colour=blue",
	"http://u:pw@h/0",
	"secret@localhost",
	"://",
	"",
	"redis://",
	"redis+://h",
	"redis+sentinel://h/0",
	"redis://h/0?master_name=",
	"redis://h/0#frag:pass@x",
}

// FuzzParseEndpoint: no URL makes parseEndpoint, redactURL or the redactor
// panic; an accepted URL names its kind, at least one address, a client
// constructor, and (Sentinel) a master name.
func FuzzParseEndpoint(f *testing.F) {
	for _, s := range urlSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		e, err := parseEndpoint(target{url: raw, source: "--redis"})
		if e == nil {
			t.Fatalf("parseEndpoint(%q) returned no endpoint", raw)
		}
		_ = redactURL(raw)
		r := &redactor{}
		r.addURL(raw)
		_ = r.clean(raw)
		if err != nil {
			return
		}
		switch {
		case e.kind != "server" && e.kind != "sentinel" && e.kind != "cluster":
			t.Fatalf("%q: kind %q", raw, e.kind)
		case len(e.addrs) == 0 || e.addrs[0] == "":
			t.Fatalf("%q: accepted without an address", raw)
		case e.newClient == nil:
			t.Fatalf("%q: accepted without a client constructor", raw)
		case e.kind == "sentinel" && e.master == "":
			t.Fatalf("%q: Sentinel URL accepted without a master name", raw)
		}
		_ = e.where()
	})
}

// FuzzRedaction: a password (in the userinfo or a *password* query
// parameter) of at least minSecret bytes never appears in what dlock
// prints about the URL: the displayed URL, the endpoint's description, or
// the error message for a URL it rejects, after the redactor ran. Only
// coincidences are excused: the password also shows when the URL carries
// another one in its place.
func FuzzRedaction(f *testing.F) {
	f.Add(uint8(0), "user", "s3cret-Pa55", "127.0.0.1:6379", "/0", false)
	f.Add(uint8(1), "", "pw/with/slash", "h:1", "/2", false)
	f.Add(uint8(2), "u", "p@ss@word", "h1,h2", "/0?master_name=m", false)
	f.Add(uint8(3), "", "clusterpw", "h1:7000", "", false)
	f.Add(uint8(2), "", "spw12345", "h1", "/0?master_name=m&sentinel_password=", true)
	f.Add(uint8(0), "u", "abc%zz", "h", "/0", false)
	f.Add(uint8(0), "u", "pw#frag", "h", "/0", false)
	f.Add(uint8(4), "u", "pass word", "h", "/0", false)
	f.Add(uint8(0), "u", "pw?x=1", "h", "/0", false)
	f.Fuzz(func(t *testing.T, scheme uint8, user, pass, host, rest string, inQuery bool) {
		if len(pass) < minSecret {
			t.Skip()
		}
		if inQuery {
			// Only the value of a query parameter named *password* is a
			// secret: the URL must end in "?...&<name>password=" (no
			// fragment before it).
			q := host + rest
			i := strings.LastIndexAny(q, "?&")
			if strings.IndexByte(q, '?') < 0 || strings.Contains(q, "#") || i < 0 ||
				!strings.HasSuffix(strings.ToLower(q), "password=") || strings.Count(q[i+1:], "=") != 1 ||
				strings.ContainsAny(pass, "&#") {
				t.Skip() // (an unescaped '&' or '#' ends a query value)
			}
		} else if strings.ContainsAny(user, ":#/?@") {
			// A password may hold any character (people do not escape
			// them); the user name and host are plain, so the password
			// is what sits between the first ':' and the last '@'.
			t.Skip()
		}
		if strings.ContainsAny(host, "@#/?") || strings.Contains(rest, "@") {
			t.Skip()
		}
		schemes := []string{"redis", "rediss", "redis+sentinel", "redis+cluster", "http"}
		build := func(pw string) string {
			s := schemes[int(scheme)%len(schemes)] + "://"
			if inQuery {
				return s + host + rest + pw
			}
			return s + user + ":" + pw + "@" + host + rest
		}
		raw := build(pass)
		printed := func(raw string) string {
			r := &redactor{}
			r.addURL(raw)
			e, err := parseEndpoint(target{url: raw, source: "--redis"})
			var msg string
			if err != nil {
				msg = fmt.Sprintf("dlock: invalid Redis URL %s (from --redis): %v", e.display, err)
			} else {
				msg = fmt.Sprintf("dlock: cannot reach Redis at %s: refused", e.where())
			}
			return r.clean(msg)
		}
		out := printed(raw)
		if !strings.Contains(out, pass) {
			return
		}
		other := strings.Repeat("Q", len(pass))
		if strings.Contains(pass, "Q") {
			other = strings.Repeat("Z", len(pass))
		}
		if strings.Contains(printed(build(other)), pass) {
			t.Skip("the password is also part of the fixed text")
		}
		t.Fatalf("URL %q: the password %q is printed:\n%s", raw, pass, out)
	})
}
