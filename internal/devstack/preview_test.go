package devstack_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/edge"
	"github.com/warren-mesh/warren/internal/devstack"
	"github.com/warren-mesh/warren/internal/wire"
	warren "github.com/warren-mesh/warren/sdk"
)

const previewDomain = "preview.localhost"

// seen is what the tenant's server (testdata/previewserver.py) answers: the request as it reached it.
type seen struct {
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers"`
}

// startPreviewServer starts the tenant's server on port, a background process of the sandbox.
func startPreviewServer(t testing.TB, ctx context.Context, sb *warren.Sandbox, port int) {
	t.Helper()
	src, err := os.ReadFile("testdata/previewserver.py")
	if err != nil {
		t.Fatal(err)
	}
	startServer(t, ctx, sb, port, map[string]string{"previewserver.py": string(src)}, "python3", "previewserver.py", itoa(port))
}

// startServer writes files (path: content) into the sandbox and starts command there, a background process,
// until it listens on port.
func startServer(t testing.TB, ctx context.Context, sb *warren.Sandbox, port int, files map[string]string, command string, args ...string) {
	t.Helper()
	for name, content := range files {
		if _, err := sb.WriteFile(ctx, name, strings.NewReader(content)); err != nil {
			t.Fatal(err)
		}
	}
	p, err := sb.StartProcess(ctx, warren.ProcStartRequest{Command: command, Args: args})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.WaitProcess(ctx, p.ID, warren.ProcWaitRequest{For: warren.WaitPort, Port: port}); err != nil {
		logs, _ := sb.ProcessLogs(ctx, p.ID, 0)
		t.Fatalf("wait for port %d: %v (logs %+v)", port, err, logs)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// get sends a GET through the edge, with host (a preview host; "" the edge's own) and headers.
func get(t *testing.T, st *devstack.Stack, hc *http.Client, rawURL, host string, headers ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

// wireCode is the error code of an edge's error answer.
func wireCode(resp *http.Response, body []byte) wire.Code {
	return wire.CodeOf(wire.ReadHTTPError(resp.StatusCode, body))
}

// pathURL is the path-based URL of a preview token, on the stack's preview origin.
func pathURL(st *devstack.Stack, tok string) string { return st.PreviewURL() + "/preview/" + tok + "/" }

// hostOf is the preview host of a token, with the edge's port.
func hostOf(st *devstack.Stack, tok string) string {
	_, port, _ := strings.Cut(st.Addr(), ":")
	return tok + "." + previewDomain + ":" + port
}

// Preview URLs end to end, through the edge to a real runner under bubblewrap: a server the sandbox runs
// (a background process listening on its loopback, inside its own network namespace) is reached over HTTP
// and WebSocket at its preview URL, host-based and path-based; a private preview needs its owner's token
// (or the cookie the token sets) and refuses anyone else's; a public one needs nothing; revoked, expired and
// forged URLs are refused; the server never sees the Warren token, cookie or headers; the user's live
// previews are limited.
func TestPreviewURLs(t *testing.T) {
	st := startStack(t, func(c *devstack.Config) {
		c.Previews = &edge.PreviewConfig{Domain: previewDomain, MaxPerUser: 3}
	})
	ctx := ctxT(t)
	alice := mint(t, st, "alice")
	c, err := warren.New(st.URL(), alice)
	if err != nil {
		t.Fatal(err)
	}
	sb := c.Sandbox()
	const port = 18790
	startPreviewServer(t, ctx, sb, port)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	priv, err := sb.CreatePreview(ctx, warren.PreviewRequest{Port: port})
	if err != nil {
		t.Fatal(err)
	}
	if priv.Public || priv.Port != port || !strings.HasPrefix(priv.URL, "http://"+priv.Token+"."+previewDomain+":") ||
		!strings.HasPrefix(priv.Token, itoa(port)+"-"+priv.ID+"-") || !priv.Expires.After(priv.Created) {
		t.Fatalf("private preview %+v", priv)
	}
	pub, err := sb.CreatePreview(ctx, warren.PreviewRequest{Port: port, Public: true})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("PrivateNeedsTheOwnersToken", func(t *testing.T) {
		for _, u := range []struct{ url, host string }{{st.URL() + "/hello", hostOf(st, priv.Token)}, {pathURL(st, priv.Token) + "hello", ""}} {
			if resp, body := get(t, st, noRedirect, u.url, u.host); resp.StatusCode != http.StatusUnauthorized || wireCode(resp, body) != wire.Unauthenticated {
				t.Fatalf("%s without a token: %d %s", u.url, resp.StatusCode, body)
			}
			if resp, body := get(t, st, noRedirect, u.url, u.host, "Authorization", "Bearer "+mint(t, st, "bob")); resp.StatusCode != http.StatusForbidden || wireCode(resp, body) != wire.PermissionDenied {
				t.Fatalf("%s with another user's token: %d %s", u.url, resp.StatusCode, body)
			}
			resp, body := get(t, st, noRedirect, u.url+"?q=1", u.host, "Authorization", "Bearer "+alice, "X-Warren-Grant", "forged", "Cookie", "app=1; "+"warren_preview=x")
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s with the owner's token: %d %s", u.url, resp.StatusCode, body)
			}
			var s seen
			if err := json.Unmarshal(body, &s); err != nil {
				t.Fatal(err)
			}
			if s.Path != "/hello?q=1" || s.Headers["Cookie"] != "app=1" || s.Headers["Host"] != "localhost:"+itoa(port) {
				t.Fatalf("the server saw %+v", s)
			}
			assertNoWarrenCredentials(t, s, alice)
			// A request that is not redirected (Authorization given too, as a WebSocket's or a POST's would be)
			// still loses the ?token= on its way to the tenant's server.
			resp, body = get(t, st, noRedirect, u.url+"?x=y&token="+url.QueryEscape(alice), u.host, "Authorization", "Bearer "+alice)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s with the owner's token twice: %d %s", u.url, resp.StatusCode, body)
			}
			s = seen{}
			if err := json.Unmarshal(body, &s); err != nil {
				t.Fatal(err)
			}
			if s.Path != "/hello?x=y" {
				t.Fatalf("the server saw %+v", s)
			}
			assertNoWarrenCredentials(t, s, alice)
		}
	})

	t.Run("TokenInQuerySetsCookie", func(t *testing.T) {
		jar, _ := cookiejar.New(nil)
		hc := &http.Client{Jar: jar}
		u := pathURL(st, priv.Token) + "page?x=y&token=" + url.QueryEscape(alice)
		resp, body := get(t, st, hc, u, "")
		if resp.StatusCode != http.StatusOK || resp.Request.URL.Query().Has("token") {
			t.Fatalf("open with ?token=: %d %s (ended at %s)", resp.StatusCode, body, resp.Request.URL)
		}
		var s seen
		_ = json.Unmarshal(body, &s)
		if s.Path != "/page?x=y" {
			t.Fatalf("the server saw %+v", s)
		}
		assertNoWarrenCredentials(t, s, alice)
		// The cookie alone opens the preview afterwards, and only this one.
		if resp, body := get(t, st, hc, pathURL(st, priv.Token)+"again", ""); resp.StatusCode != http.StatusOK {
			t.Fatalf("with the cookie: %d %s", resp.StatusCode, body)
		}
		for _, ck := range jar.Cookies(mustURL(t, pathURL(st, priv.Token))) {
			if resp, body := get(t, st, noRedirect, pathURL(st, pub.Token), "", "Cookie", ck.String()); resp.StatusCode != http.StatusOK {
				t.Fatalf("public with a cookie: %d %s", resp.StatusCode, body)
			}
		}
	})

	t.Run("WebSocket", func(t *testing.T) {
		dial := func(u string, h http.Header) (*websocket.Conn, error) {
			conn, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: h})
			return conn, err
		}
		wsURL := "ws" + strings.TrimPrefix(pathURL(st, priv.Token), "http") + "ws"
		if _, err := dial(wsURL, nil); err == nil {
			t.Fatal("a private preview's WebSocket opened without a token")
		}
		for _, tc := range []struct {
			url string
			h   http.Header
		}{
			{wsURL, http.Header{"Authorization": {"Bearer " + alice}}},
			{"ws" + strings.TrimPrefix(pathURL(st, pub.Token), "http") + "ws", nil},
		} {
			conn, err := dial(tc.url, tc.h)
			if err != nil {
				t.Fatalf("dial %s: %v", tc.url, err)
			}
			if err := conn.Write(ctx, websocket.MessageText, []byte("hi")); err != nil {
				t.Fatal(err)
			}
			typ, msg, err := conn.Read(ctx)
			if err != nil || typ != websocket.MessageText || string(msg) != "echo: hi" {
				t.Fatalf("echo: %v %q %v", typ, msg, err)
			}
			conn.Close(websocket.StatusNormalClosure, "")
		}
	})

	t.Run("PublicNeedsNoToken", func(t *testing.T) {
		for _, u := range []struct{ url, host string }{{st.URL() + "/", hostOf(st, pub.Token)}, {pathURL(st, pub.Token), ""}} {
			if resp, body := get(t, st, noRedirect, u.url, u.host); resp.StatusCode != http.StatusOK {
				t.Fatalf("public %s: %d %s", u.url, resp.StatusCode, body)
			}
		}
	})

	t.Run("ForgedRefused", func(t *testing.T) {
		sig := pub.Token[len(pub.Token)-1:]
		other := "a"
		if sig == "a" {
			other = "b"
		}
		forged := []string{
			pub.Token[:len(pub.Token)-1] + other,                 // another signature
			strings.Replace(pub.Token, itoa(port)+"-", "22-", 1), // the same signature on another port
		}
		for _, tok := range forged {
			if resp, body := get(t, st, noRedirect, pathURL(st, tok), ""); resp.StatusCode != http.StatusNotFound {
				t.Fatalf("forged %s: %d %s", tok, resp.StatusCode, body)
			}
			if resp, body := get(t, st, noRedirect, st.URL()+"/", hostOf(st, tok)); resp.StatusCode != http.StatusNotFound {
				t.Fatalf("forged host %s: %d %s", tok, resp.StatusCode, body)
			}
		}
	})

	t.Run("ListAndLimit", func(t *testing.T) {
		list, err := sb.Previews(ctx)
		if err != nil || len(list) != 2 || list[0].ID != priv.ID || list[1].ID != pub.ID || list[0].Token != priv.Token {
			t.Fatalf("list %+v, %v", list, err)
		}
		bobs, err := client(t, st, "bob").Sandbox().Previews(ctx)
		if err != nil || len(bobs) != 0 {
			t.Fatalf("bob's list %+v, %v", bobs, err)
		}
		third, err := sb.CreatePreview(ctx, warren.PreviewRequest{Port: 9})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sb.CreatePreview(ctx, warren.PreviewRequest{Port: 10}); !warren.IsCode(err, wire.ResourceExhausted) {
			t.Fatalf("a fourth preview: %v", err)
		}
		if err := sb.RevokePreview(ctx, third.ID); err != nil {
			t.Fatal(err)
		}
		for _, req := range []warren.PreviewRequest{{Port: 0}, {Port: 70000}, {Port: 80, TTLSeconds: 365 * 86400}} {
			if _, err := sb.CreatePreview(ctx, req); !warren.IsCode(err, wire.InvalidArgument) {
				t.Fatalf("create %+v: %v", req, err)
			}
		}
	})

	t.Run("CLI", func(t *testing.T) {
		run := func(args ...string) string {
			t.Helper()
			cmd := exec.Command(binary, args...)
			cmd.Env = append(os.Environ(), "WARREN_URL="+st.URL(), "WARREN_TOKEN="+alice)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("warren %v: %v", args, err)
			}
			return strings.TrimSpace(string(out))
		}
		var p warren.Preview
		if err := json.Unmarshal([]byte(run("preview", "create", "-public", "-ttl", "10m", "-json", itoa(port))), &p); err != nil {
			t.Fatal(err)
		}
		if !p.Public || p.Expires.Sub(p.Created) != 10*time.Minute {
			t.Fatalf("created %+v", p)
		}
		if resp, body := get(t, st, noRedirect, pathURL(st, p.Token), ""); resp.StatusCode != http.StatusOK {
			t.Fatalf("the CLI's preview: %d %s", resp.StatusCode, body)
		}
		if out := run("preview", "ls"); !strings.Contains(out, p.ID) || !strings.Contains(out, "public") {
			t.Fatalf("ls: %q", out)
		}
		run("preview", "rm", p.ID)
		if out := run("preview", "ls"); strings.Contains(out, p.ID) {
			t.Fatalf("ls after rm: %q", out)
		}
	})

	t.Run("Revoked", func(t *testing.T) {
		if err := client(t, st, "bob").Sandbox().RevokePreview(ctx, priv.ID); !warren.IsCode(err, wire.NotFound) {
			t.Fatalf("bob revoked alice's preview: %v", err)
		}
		if err := sb.RevokePreview(ctx, priv.ID); err != nil {
			t.Fatal(err)
		}
		if resp, body := get(t, st, noRedirect, pathURL(st, priv.Token), "", "Authorization", "Bearer "+alice); resp.StatusCode != http.StatusNotFound {
			t.Fatalf("revoked: %d %s", resp.StatusCode, body)
		}
		if err := sb.RevokePreview(ctx, priv.ID); !warren.IsCode(err, wire.NotFound) {
			t.Fatalf("revoked twice: %v", err)
		}
	})

	t.Run("Expired", func(t *testing.T) {
		p, err := sb.CreatePreview(ctx, warren.PreviewRequest{Port: port, Public: true, TTLSeconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		if resp, body := get(t, st, noRedirect, pathURL(st, p.Token), ""); resp.StatusCode != http.StatusOK {
			t.Fatalf("before expiry: %d %s", resp.StatusCode, body)
		}
		time.Sleep(time.Until(p.Expires) + 100*time.Millisecond) // the edge's clock decides; this one only waits
		resp, body := get(t, st, noRedirect, pathURL(st, p.Token), "")
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "expired") {
			t.Fatalf("after expiry: %d %s", resp.StatusCode, body)
		}
	})
}

// assertNoWarrenCredentials fails when anything of Warren's reached the tenant's server.
func assertNoWarrenCredentials(t *testing.T, s seen, tok string) {
	t.Helper()
	for k, v := range s.Headers {
		if strings.Contains(v, tok) || strings.HasPrefix(strings.ToLower(k), "x-warren") || strings.EqualFold(k, "Authorization") ||
			strings.Contains(v, "warren_preview") {
			t.Fatalf("the tenant's server saw %s: %s", k, v)
		}
	}
	if strings.Contains(s.Path, tok) || strings.Contains(s.Path, "token=") {
		t.Fatalf("the tenant's server saw the token in %s", s.Path)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// BenchmarkPreview measures one small GET (keep-alive, sequential) to the same Python server three ways:
// direct (a copy of the server on this host's loopback, no Warren), runner (the runner's preview relay,
// with its key: the hop into the sandbox's network namespace), and edge (the public preview URL: the edge's
// verification against the store, then the runner). edge − direct is what a preview URL costs.
//
//	go test ./internal/devstack -run '^$' -bench BenchmarkPreview -benchtime 2000x
func BenchmarkPreview(b *testing.B) {
	st := startStack(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := warren.New(st.URL(), mint(b, st, "bench"))
	if err != nil {
		b.Fatal(err)
	}
	const port = 18795
	startPreviewServer(b, ctx, c.Sandbox(), port)
	p, err := c.Sandbox().CreatePreview(ctx, warren.PreviewRequest{Port: port, Public: true})
	if err != nil {
		b.Fatal(err)
	}
	entry, err := st.Registry.Lookup(ctx, devstack.DevIssuer, "bench")
	if err != nil {
		b.Fatal(err)
	}
	direct := hostPreviewServer(b)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	run := func(b *testing.B, url string, header ...string) {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		b.ResetTimer()
		for range b.N {
			resp, err := hc.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("%s: %d", url, resp.StatusCode)
			}
		}
	}
	b.Run("direct", func(b *testing.B) { run(b, direct+"/bench") })
	b.Run("runner", func(b *testing.B) {
		run(b, "http://"+entry.Addr+"/v1/preview/"+strconv.Itoa(port)+"/bench", "Authorization", "Bearer "+entry.Key)
	})
	b.Run("edge", func(b *testing.B) { run(b, pathURL(st, p.Token)+"bench") })
}

// hostPreviewServer runs testdata/previewserver.py on this host's loopback and returns its base URL.
func hostPreviewServer(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command("python3", "testdata/previewserver.py", strconv.Itoa(port))
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := make([]byte, len("serving\n"))
	if _, err := io.ReadFull(out, line); err != nil {
		b.Fatal(err)
	}
	return "http://127.0.0.1:" + strconv.Itoa(port)
}
