package devstack_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warren-mesh/warren/edge"
	"github.com/warren-mesh/warren/internal/devstack"
	warren "github.com/warren-mesh/warren/sdk"
)

// hostilePage is a tenant's page that tries to mint a playground token for alice through every origin it
// can reach: its own (a relative URL) and those __TARGETS__ lists, with a CORS request (the reply readable
// if it gets through) and a no-cors one (a simple request, sent without a preflight: only the server's
// refusal stops it). It leaves what it got in window.results and sets body[data-done].
const hostilePage = `<!doctype html><meta charset="utf-8"><title>a tenant's page</title><body>
<script>
const targets = ["/playground/token", ...__TARGETS__];
const body = JSON.stringify({ user: "alice" });
async function attempt(url, init) {
  const out = { url, mode: init.mode || "cors" };
  try {
    const r = await fetch(url, { method: "POST", body, credentials: "include", ...init });
    const text = r.type === "opaque" ? "" : await r.text();
    return { ...out, status: r.status, type: r.type, body: text.slice(0, 300), token: /"token"\s*:/.test(text) ? text : "" };
  } catch (e) {
    return { ...out, error: String(e) };
  }
}
(async () => {
  const results = [];
  for (const url of targets) {
    results.push(await attempt(url, { headers: { "Content-Type": "application/json" } }));
    results.push(await attempt(url, { headers: { "Content-Type": "text/plain" }, mode: "no-cors" }));
  }
  window.results = results;
  document.body.dataset.done = "true";
})();
</script>`

// tokenLog counts the playground's token decisions in the stack's log (its "minted" and "refused"
// records) and passes records at Warn and above to stderr.
type tokenLog struct {
	slog.Handler
	minted, refused *atomic.Int64
}

func newTokenLog() tokenLog {
	return tokenLog{Handler: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}),
		minted: new(atomic.Int64), refused: new(atomic.Int64)}
}

func (h tokenLog) Enabled(context.Context, slog.Level) bool { return true }

func (h tokenLog) Handle(ctx context.Context, r slog.Record) error {
	switch r.Message {
	case "playground token minted":
		h.minted.Add(1)
	case "playground token refused":
		h.refused.Add(1)
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h tokenLog) WithAttrs(a []slog.Attr) slog.Handler { h.Handler = h.Handler.WithAttrs(a); return h }
func (h tokenLog) WithGroup(g string) slog.Handler      { h.Handler = h.Handler.WithGroup(g); return h }

// The attack of issue #21: a tenant's page at a preview URL of `warren dev` POSTs to /playground/token. When
// path previews shared the edge's origin, that request was the playground page's own in every respect the
// endpoint checks (same origin, loopback Host, loopback client): one click on a tenant's link minted a token
// for any user, so every sandbox of the dev stack. Here headless Chromium opens a hostile page served by a
// tenant's server in a sandbox, at public and private previews, path-based (their own origin) and host-based
// (<token>.preview.localhost, which Chromium resolves to loopback); the page tries its own origin, the
// edge's (127.0.0.1 and localhost) and the path previews' origin. No attempt gets a token and the
// playground mints none (it refuses those that reach it); the playground page itself still mints one.
func TestPreviewPagesCannotMintPlaygroundTokens(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: runner processes under bubblewrap and Chromium")
	}
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium not found: run make tools (it installs Debian's chromium): %v", err)
	}
	tl := newTokenLog()
	st := startStack(t, func(c *devstack.Config) {
		c.Previews = &edge.PreviewConfig{Domain: previewDomain}
		c.Logger = slog.New(tl)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb := client(t, st, "mallory").Sandbox()
	owner := mint(t, st, "mallory")

	var targets []string
	for _, base := range []string{st.URL(), pathURL(st, "x")} {
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		for _, host := range []string{"127.0.0.1", "localhost"} {
			targets = append(targets, "http://"+host+":"+u.Port()+"/playground/token")
		}
	}
	list, _ := json.Marshal(targets)
	const port = 18796
	startServer(t, ctx, sb, port, map[string]string{"hostile.html": strings.Replace(hostilePage, "__TARGETS__", string(list), 1)},
		"python3", "-m", "http.server", itoa(port), "--bind", "127.0.0.1")
	pub, err := sb.CreatePreview(ctx, warren.PreviewRequest{Port: port, Public: true})
	if err != nil {
		t.Fatal(err)
	}
	priv, err := sb.CreatePreview(ctx, warren.PreviewRequest{Port: port})
	if err != nil {
		t.Fatal(err)
	}

	b := launchChromium(ctx, t, chromium)
	for _, c := range []struct{ name, url string }{
		{"public, path", pathURL(st, pub.Token) + "hostile.html"},
		{"public, host", pub.URL + "hostile.html"},
		// Its owner opens a private preview (once with the token, then with the access cookie it sets).
		{"private, path", pathURL(st, priv.Token) + "hostile.html?token=" + url.QueryEscape(owner)},
		{"private, host", priv.URL + "hostile.html?token=" + url.QueryEscape(owner)},
	} {
		refused := tl.refused.Load()
		page := b.newPage(ctx, t)
		page.navigate(ctx, t, c.url)
		page.waitFor(ctx, t, `document.body?.dataset.done === "true" && !location.search.includes("token=")`)
		var results []struct {
			URL, Mode, Type, Body, Token, Error string
			Status                              int
		}
		page.evalInto(ctx, t, `window.results`, &results)
		if len(results) != 2*(1+len(targets)) {
			t.Fatalf("%s: the page reported %d attempts, want %d: %+v", c.name, len(results), 2*(1+len(targets)), results)
		}
		for _, r := range results {
			t.Logf("%s: %s %s: status %d %s %s%s", c.name, r.Mode, r.URL, r.Status, r.Type, r.Error, r.Body)
			if r.Token != "" {
				t.Errorf("%s: the page got a token from %s (%s): %s", c.name, r.URL, r.Mode, r.Token)
			}
			// On its own origin, a preview host's paths are the tenant's: the playground is not there.
			if r.URL == "/playground/token" && strings.Contains(r.Body, "playground") {
				t.Errorf("%s: the preview's own origin reached the playground: %d %s", c.name, r.Status, r.Body)
			}
		}
		if n := tl.minted.Load(); n != 0 {
			t.Fatalf("%s: the playground minted %d tokens for the page", c.name, n)
		}
		// The simple requests to the edge's origin did reach the playground, which refused them.
		if tl.refused.Load() == refused {
			t.Errorf("%s: the playground refused nothing: the page's requests never reached it", c.name)
		}
	}

	// The playground page itself still mints a token, on the edge's origin (its script mints one as it
	// loads, then this one).
	page := b.newPage(ctx, t)
	page.navigate(ctx, t, st.PlaygroundURL())
	page.waitFor(ctx, t, `document.readyState === "complete"`)
	var got struct {
		Status      int
		Token, User string
	}
	page.evalInto(ctx, t, `(async () => {
		const r = await fetch("token", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ user: "alice" }) });
		const b = await r.json();
		return { status: r.status, token: b.token ?? "", user: b.user ?? "" };
	})()`, &got)
	if got.Status != 200 || got.User != "alice" || got.Token == "" || tl.minted.Load() == 0 {
		t.Fatalf("the playground's own page: %d user %q token %t, %d minted", got.Status, got.User, got.Token != "", tl.minted.Load())
	}
	c, err := warren.New(st.URL(), got.Token)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Sandbox().Previews(ctx); err != nil {
		t.Fatalf("the playground's token: %v", err)
	}
}
