package tasks

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/netdeny"
	"github.com/warren-mesh/warren/internal/wire"
	warren "github.com/warren-mesh/warren/sdk"
)

func TestCheckWebhookURL(t *testing.T) {
	for _, u := range []string{"https://hooks.example.com/x", "https://93.184.216.34:8443/a?b=c", "https://[2606:4700::1]/"} {
		if _, err := CheckWebhookURL(u, false); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
	refused := []string{
		"http://hooks.example.com/x",                                 // http outside development
		"ftp://hooks.example.com/",                                   // not http
		"https://127.0.0.1/", "https://localhost/", "https://[::1]/", // loopback
		"https://10.0.0.1/", "https://192.168.1.1/", "https://172.16.0.1/", "https://[fd00::1]/", // private
		"https://169.254.169.254/latest/meta-data", "https://[fe80::1]/", // link-local (cloud metadata)
		"https://0.0.0.0/", "https://100.64.0.1/", "https://[::ffff:127.0.0.1]/", "https://224.0.0.1/",
		"https://user:pw@hooks.example.com/", "https://hooks.example.com/#frag", "https:///nohost",
		"https://hooks.example.com:99999/", "/relative", "https://" + strings.Repeat("a", MaxWebhookURL) + ".com/",
	}
	for _, u := range refused {
		if _, err := CheckWebhookURL(u, false); wire.CodeOf(err) != wire.InvalidArgument {
			t.Errorf("%s: %v, want invalid_argument", u, err)
		}
	}
	// Development: http and loopback.
	if _, err := CheckWebhookURL("http://127.0.0.1:9/hook", true); err != nil {
		t.Errorf("dev loopback: %v", err)
	}
}

// TestWebhookAddresses: a webhook URL naming an address of the deny list (internal/netdeny, which the
// sandbox's egress filter installs too) is refused, IPv4 addresses reached through IPv6 included.
func TestWebhookAddresses(t *testing.T) {
	for s, want := range map[string]bool{
		"8.8.8.8": true, "2606:4700::1": true, "127.0.0.2": false, "10.1.2.3": false, "169.254.169.254": false,
		"::1": false, "::ffff:10.0.0.1": false, "100.127.255.255": false, "0.0.0.0": false, "ff02::1": false,
		// IPv4 reached through IPv6 forms a gateway translates (NAT64 in an IPv6-only cluster, 6to4, Teredo),
		// the IPv4-compatible form, and ranges netip does not call private.
		"64:ff9b::a00:1": false, "64:ff9b::7f00:1": false, "64:ff9b::a9fe:a9fe": false, "64:ff9b::808:808": true,
		"64:ff9b:1::a00:1": false, "2002:a00:1::1": false, "2002:7f00:1::": false, "2002:808:808::1": false,
		"2001:0:808:808::f5ff:fffe": false, "::a00:1": false, "::127.0.0.1": false, "::7f00:1": false,
		"fec0::1": false, "fd00::1": false, "fe80::1": false, "fe80::1%eth0": false, "::ffff:8.8.8.8": true,
		"0.1.2.3": false, "198.18.0.1": false, "192.0.0.8": false, "240.0.0.1": false, "255.255.255.255": false,
		"::ffff:169.254.169.254": false, "192.0.2.1": false, "2001:db8::1": false, "3fff::1": false,
	} {
		a := netip.MustParseAddr(s)
		host := a.String()
		if a.Is6() {
			host = "[" + strings.Replace(host, "%", "%25", 1) + "]"
		}
		_, err := CheckWebhookURL("https://"+host+"/hook", false)
		if got := err == nil; got != want {
			t.Errorf("%s: accepted %v, want %v (%v)", s, got, want, err)
		}
		if err != nil && wire.CodeOf(err) != wire.InvalidArgument {
			t.Errorf("%s: %v, want invalid_argument", s, err)
		}
		if got := webhookDialControl("tcp", netip.AddrPortFrom(a, 443).String(), nil) == nil; got != want {
			t.Errorf("%s: dialled %v, want %v", s, got, want)
		}
	}
}

// The production client refuses to connect to a loopback address even when the URL names a host
// (DNS pointing at an internal service): the guard is on the address dialled.
func TestWebhookRefusesLoopbackInProduction(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	u := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	st := deliverWebhook(context.Background(), webhookClient(false), u, "t-x", "s", []byte("{}"), 3, time.Millisecond, time.Now)
	if st.Delivered || st.Attempts != 1 || !strings.Contains(st.LastError, errPrivateAddr.Error()) || hits.Load() != 0 {
		t.Fatalf("delivery to loopback: %+v, %d hits", st, hits.Load())
	}
	// With the development flag it is delivered.
	st = deliverWebhook(context.Background(), webhookClient(true), u, "t-x", "s", []byte("{}"), 3, time.Millisecond, time.Now)
	if !st.Delivered || hits.Load() != 1 {
		t.Fatalf("dev delivery: %+v", st)
	}
}

func TestWebhookSignedRetriedAndBounded(t *testing.T) {
	var n atomic.Int64
	status := http.StatusInternalServerError
	var lastHeader http.Header
	var lastBody []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lastBody, _ = io.ReadAll(r.Body)
		lastHeader = r.Header.Clone()
		if n.Add(1) < 3 {
			w.WriteHeader(status)
		}
	}))
	defer srv.Close()
	secret := WebhookSecret([]byte("master-secret-for-tests"), "iss-1")
	body := []byte(`{"id":"t-abc","status":"succeeded","filesChanged":[]}`)
	st := deliverWebhook(context.Background(), webhookClient(true), srv.URL, "t-abc", secret, body, 5, time.Millisecond, time.Now)
	if !st.Delivered || st.Attempts != 3 {
		t.Fatalf("delivery: %+v", st)
	}
	task, err := warren.VerifyWebhook(secret, lastHeader, lastBody, 0, time.Now())
	if err != nil || task.ID != "t-abc" {
		t.Fatalf("verify: %+v, %v", task, err)
	}
	if _, err := warren.VerifyWebhook(secret, lastHeader, lastBody, time.Minute, time.Now().Add(time.Hour)); !errors.Is(err, warren.ErrWebhookSignature) {
		t.Fatalf("an old webhook verifies: %v", err)
	}
	if WebhookSecret([]byte("master-secret-for-tests"), "iss-2") == secret {
		t.Fatal("two issuers share a webhook secret")
	}

	// Always failing: bounded by the attempts.
	n.Store(-100)
	st = deliverWebhook(context.Background(), webhookClient(true), srv.URL, "t-abc", secret, body, 4, time.Millisecond, time.Now)
	if st.Delivered || st.Attempts != 4 {
		t.Fatalf("failing delivery: %+v", st)
	}
	// A 4xx other than 408 and 429 is final.
	n.Store(-100)
	status = http.StatusForbidden
	st = deliverWebhook(context.Background(), webhookClient(true), srv.URL, "t-abc", secret, body, 4, time.Millisecond, time.Now)
	if st.Delivered || st.Attempts != 1 {
		t.Fatalf("403 delivery: %+v", st)
	}
}

// A delivery waiting to retry ends with its context: the wait is cut short and the status says why.
func TestWebhookRetryWaitEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		cancel() // the task's context ends while its first delivery is answered 503
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	st := deliverWebhook(ctx, webhookClient(true), srv.URL, "t-x", "s", []byte("{}"), 5, time.Hour, time.Now)
	if st.Delivered || st.Attempts != 1 || st.LastError != "cancelled: context canceled" {
		t.Fatalf("cancelled delivery: %+v", st)
	}
}

func FuzzCheckWebhookURL(f *testing.F) {
	for _, s := range []string{"https://a.example/x", "http://127.0.0.1/", "https://[::1]:80/", "https://u@h/", "%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := CheckWebhookURL(s, false)
		if err != nil {
			if wire.CodeOf(err) != wire.InvalidArgument {
				t.Fatalf("%q: %v", s, err)
			}
			return
		}
		if u.Scheme != "https" || u.User != nil || u.Hostname() == "" {
			t.Fatalf("%q accepted as %v", s, u)
		}
		if ip, err := netip.ParseAddr(u.Hostname()); err == nil && netdeny.Denied(ip) {
			t.Fatalf("%q: non-public address accepted", s)
		}
	})
}
