package main

import (
	"flag"
	"io"
	"testing"
	"time"
)

// -url takes an address without a scheme: http:// on loopback (warren dev), https:// elsewhere. Before,
// -url 127.0.0.1:8080 failed with the URL parser's "first path segment in URL cannot contain colon".
func TestURLWithoutScheme(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:8080":           "http://127.0.0.1:8080",
		"localhost:8080/base":      "http://localhost:8080/base",
		"[::1]:8080":               "http://[::1]:8080",
		"edge.example.com":         "https://edge.example.com",
		"203.0.113.7:443":          "https://203.0.113.7:443",
		"http://127.0.0.1:8080":    "http://127.0.0.1:8080",
		"https://edge.example.com": "https://edge.example.com",
		"":                         "",
	} {
		if got := withScheme(in); got != want {
			t.Errorf("withScheme(%q) = %q, want %q", in, got, want)
		}
	}
	cf := &clientFlags{token: "x"}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cf.register(fs)
	if err := fs.Parse([]string{"-url", "127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cf.client(); err != nil {
		t.Fatalf("client for -url 127.0.0.1:1: %v", err)
	}
}

// Every table shows times one way: UTC to the second. Before, proc ls printed RFC 3339 with nanoseconds,
// preview ls RFC 3339, sessions local time to the minute.
func TestOneTimeFormat(t *testing.T) {
	for in, want := range map[string]string{
		"2026-11-29T04:02:04.021491317Z": "2026-11-29 04:02:04",
		"2026-11-29T05:02:04+01:00":      "2026-11-29 04:02:04",
		"":                               "-",
		"yesterday":                      "yesterday",
	} {
		if got := showWireTime(in); got != want {
			t.Errorf("showWireTime(%q) = %q, want %q", in, got, want)
		}
	}
	if got := showTime(time.Date(2026, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600))); got != "2026-01-02 02:04:05" {
		t.Errorf("showTime = %q", got)
	}
}
