package devstack_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/coder/websocket"

	"github.com/warren-mesh/warren/internal/devstack"
	"github.com/warren-mesh/warren/internal/playground"
	"github.com/warren-mesh/warren/internal/secrets"
)

// TestPlayground drives `warren dev`'s playground page in headless Chromium against a dev stack with the
// real Claude Code CLI and the scripted model: the page mints its token, connects over WebTransport (the
// dev certificate pinned by the hash /v1/regions publishes), and a prompt makes the agent write a file:
// the Write call shows while the turn streams, then the turn's cost; the file appears in the file browser
// and opens with its content; the exec box runs a command and shows its output and exit. A second load
// forces the WebSocket. A screenshot is kept in $WARREN_TEST_ARTIFACTS (default: a new temporary
// directory, logged).
func TestPlayground(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: runner processes under bubblewrap, the Claude Code CLI and Chromium")
	}
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium not found: run make tools (it installs Debian's chromium): %v", err)
	}
	if !playground.SDKBuilt() {
		t.Fatal("the TypeScript SDK's browser build is not embedded in internal/playground/sdk: run make sdk-js")
	}
	st := agentStack(t, agentOpts{})
	checkSDKFresh(t, st.PlaygroundURL())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	b := launchChromium(ctx, t, chromium)
	page := b.newPage(ctx, t)
	page.navigate(ctx, t, st.PlaygroundURL())
	page.waitFor(ctx, t, `document.body.dataset.state === "ready"`)
	if tr := page.text(ctx, t, "#transport"); tr != "webtransport" {
		t.Fatalf("transport %q, want webtransport (Chromium has it and the edge publishes its certificate hash)", tr)
	}

	page.eval(ctx, t, `(() => {
		document.getElementById("prompt").value = "create playground.txt containing hello from the playground";
		document.getElementById("prompt-form").requestSubmit();
		return true;
	})()`)
	page.waitFor(ctx, t, `document.querySelector("#log .cost") !== null && document.body.dataset.state === "ready"`)
	var turn struct {
		Tools  []struct{ Name, Input, Result, Class string }
		Cost   string
		AI     string
		Order  []string
		Errors string
	}
	page.evalInto(ctx, t, `(() => ({
		tools: [...document.querySelectorAll("#log .tool-call")].map((e) => ({
			name: e.querySelector(".name").textContent, input: e.querySelector(".input").textContent,
			result: e.querySelector(".result").textContent, class: e.className })),
		cost: document.querySelector("#log .cost").textContent,
		ai: document.querySelector("#log .cost").dataset.aiMicrodollars,
		order: [...document.querySelectorAll("#log > *")].map((e) => e.className),
		errors: document.getElementById("error").hidden ? "" : document.getElementById("error").textContent,
	}))()`, &turn)
	if turn.Errors != "" {
		t.Fatalf("the page shows an error: %s", turn.Errors)
	}
	if len(turn.Tools) != 1 || !strings.Contains(turn.Tools[0].Name, "Write") || !strings.Contains(turn.Tools[0].Input, "playground.txt") ||
		!strings.Contains(turn.Tools[0].Class, "ok") {
		t.Fatalf("tool calls: %+v", turn.Tools)
	}
	if !regexp.MustCompile(`^turn cost: \$\d+\.\d{6} AI · \d+(\.\d+)? s compute · [1-9]\d* tokens`).MatchString(turn.Cost) || turn.AI == "0" || turn.AI == "" {
		t.Fatalf("cost line %q (ai %q)", turn.Cost, turn.AI)
	}
	// The tool call is in the log before the turn's cost (rendered as it streamed, not from the result).
	if strings.Join(turn.Order, ",") == "" || indexOf(turn.Order, "tool-call") < 0 || indexOf(turn.Order, "tool-call") > indexOf(turn.Order, "cost") {
		t.Fatalf("log order %q", turn.Order)
	}

	// The file browser lists the new file (refreshed after the turn); a click opens it.
	page.waitFor(ctx, t, `document.querySelector('#tree li[data-path="playground.txt"]') !== null`)
	page.eval(ctx, t, `(document.querySelector('#tree li[data-path="playground.txt"]').click(), true)`)
	page.waitFor(ctx, t, `document.getElementById("file-view").textContent.includes("hello from the playground")`)

	// The exec box.
	page.eval(ctx, t, `(() => {
		document.getElementById("command").value = "echo exec-$((6*7)) && wc -c < playground.txt && echo to-stderr >&2";
		document.getElementById("exec-form").requestSubmit();
		return true;
	})()`)
	page.waitFor(ctx, t, `document.querySelector("#exec-out .exit") !== null`)
	var ex struct{ Out, Stderr, Exit string }
	page.evalInto(ctx, t, `({ out: document.getElementById("exec-out").textContent,
		stderr: [...document.querySelectorAll("#exec-out .stderr")].map((e) => e.textContent).join(""),
		exit: document.querySelector("#exec-out .exit").dataset.exitCode })`, &ex)
	if ex.Exit != "0" || !strings.Contains(ex.Out, "exec-42") || !strings.Contains(ex.Out, "25") || !strings.Contains(ex.Stderr, "to-stderr") {
		t.Fatalf("exec: %+v", ex)
	}
	shot := page.screenshot(ctx, t)
	dir := os.Getenv("WARREN_TEST_ARTIFACTS")
	if dir == "" {
		if dir, err = os.MkdirTemp("", "warren-playground-"); err != nil {
			t.Fatal(err)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "playground.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the playground: %s (%d bytes)", path, len(shot))

	// A warren built without the SDK's browser build (a fresh clone before make sdk-js): the page says what
	// to run.
	bare := httptest.NewServer(playground.Handler(playground.Config{Issuer: devstack.DevIssuer, SDK: fstest.MapFS{}}))
	defer bare.Close()
	missing := b.newPage(ctx, t)
	missing.navigate(ctx, t, bare.URL+playground.Prefix)
	missing.waitFor(ctx, t, `document.body.dataset.state === "no-sdk"`)
	if msg := missing.text(ctx, t, "#error"); !strings.Contains(msg, "make sdk-js") {
		t.Fatalf("without the SDK the page says %q", msg)
	}

	// The WebSocket, forced: a second page runs a turn over it.
	ws := b.newPage(ctx, t)
	ws.navigate(ctx, t, st.PlaygroundURL()+"?transport=websocket")
	// Under CI's load Chromium once failed to fetch the SDK's modules for this second page ("Failed to
	// fetch dynamically imported module") though the first page had just loaded the same ones: a page
	// that says so is loaded once more (and the failure logged); a second failure fails the test.
	ws.waitFor(ctx, t, `document.body.dataset.state === "ready" || document.body.dataset.state === "no-sdk"`)
	if ws.text(ctx, t, "#status") == "no SDK" {
		t.Logf("the second page could not load the SDK's modules (%s); loading it again", ws.text(ctx, t, "#error"))
		ws.navigate(ctx, t, st.PlaygroundURL()+"?transport=websocket")
	}
	ws.waitFor(ctx, t, `document.body.dataset.state === "ready" && document.querySelector('#tree li[data-path="playground.txt"]') !== null`)
	if tr := ws.text(ctx, t, "#transport"); tr != "websocket" {
		t.Fatalf("transport %q, want websocket", tr)
	}
	// Typed as a user types: Shift+Enter is a new line and sends nothing; Enter sends.
	var keys struct{ ShiftSent, ShiftPrevented, EnterPrevented bool }
	ws.evalInto(ctx, t, `(() => {
		const p = document.getElementById("prompt");
		p.focus();
		p.value = "hello over the websocket";
		const shift = new KeyboardEvent("keydown", { key: "Enter", shiftKey: true, bubbles: true, cancelable: true });
		p.dispatchEvent(shift);
		const shiftSent = document.querySelector("#log .msg.user") !== null || p.value === "";
		const enter = new KeyboardEvent("keydown", { key: "Enter", bubbles: true, cancelable: true });
		p.dispatchEvent(enter);
		return { shiftSent, shiftPrevented: shift.defaultPrevented, enterPrevented: enter.defaultPrevented };
	})()`, &keys)
	if keys.ShiftSent || keys.ShiftPrevented || !keys.EnterPrevented {
		t.Fatalf("keys: %+v, want Shift+Enter a new line and Enter sending", keys)
	}
	ws.waitFor(ctx, t, `document.querySelector("#log .cost") !== null && document.body.dataset.state === "ready"`)
	if log := ws.text(ctx, t, "#log"); !strings.Contains(log, "hello over the websocket") || !strings.Contains(log, "turn cost: $") {
		t.Fatalf("websocket turn: %s", log)
	}

	// The token is renewed before it expires (scheduled at 80% of its life; run now), and the client
	// goes on with the new one.
	var renew struct{ RenewAt, ExpiresAt string }
	ws.evalInto(ctx, t, `({ renewAt: document.body.dataset.tokenRenewAt, expiresAt: document.body.dataset.tokenExpiresAt })`, &renew)
	renewAt, err1 := time.Parse(time.RFC3339Nano, renew.RenewAt)
	expiresAt, err2 := time.Parse(time.RFC3339Nano, renew.ExpiresAt)
	if err1 != nil || err2 != nil || !renewAt.Before(expiresAt.Add(-5*time.Minute)) || !renewAt.After(time.Now()) {
		t.Fatalf("token renewal scheduled at %q for a token expiring at %q: want well before", renew.RenewAt, renew.ExpiresAt)
	}
	ws.eval(ctx, t, `window.playground.renewToken().then(() => true)`)
	ws.waitFor(ctx, t, `document.body.dataset.tokenRenewals === "1" && document.getElementById("error").hidden`)
	ws.eval(ctx, t, `(document.getElementById("command").value = "echo renewed-ok", document.getElementById("exec-form").requestSubmit(), true)`)
	ws.waitFor(ctx, t, `document.querySelector("#exec-out .exit") !== null`)
	if out := ws.text(ctx, t, "#exec-out"); !strings.Contains(out, "renewed-ok") {
		t.Fatalf("exec after the renewal: %s", out)
	}

	// A refused token request shows its code and message (the errors are {code, message}).
	keyless := httptest.NewServer(playground.Handler(playground.Config{Issuer: devstack.DevIssuer,
		Key: func(context.Context) (secrets.Key, error) { return secrets.Key{}, errors.New("no key yet") }}))
	defer keyless.Close()
	refused := b.newPage(ctx, t)
	refused.navigate(ctx, t, keyless.URL+playground.Prefix)
	refused.waitFor(ctx, t, `document.body.dataset.state === "error"`)
	if msg := refused.text(ctx, t, "#error"); !strings.HasPrefix(msg, "unavailable: token: ") || strings.Contains(msg, "undefined") {
		t.Fatalf("a refused token request shows %q, want its code and message", msg)
	}
}

func indexOf(list []string, class string) int {
	for i, c := range list {
		if strings.Contains(c, class) {
			return i
		}
	}
	return -1
}

// checkSDKFresh fails when the embedded SDK modules differ from sdk/js/dist/src (built by make sdk-js,
// rebuilt by TestTypeScriptSDK): the copy in internal/playground/sdk is stale.
func checkSDKFresh(t *testing.T, base string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(sdkJSDir, "dist", "src", "*.js"))
	if len(files) == 0 {
		t.Fatal("sdk/js/dist/src has no modules: run make sdk-js")
	}
	for _, f := range files {
		name := filepath.Base(f)
		if name == "token.js" { // Node only, not copied
			continue
		}
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Get(base + "sdk/" + name)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Equal(got, want) {
			t.Fatalf("the playground's embedded %s differs from sdk/js/dist/src (status %d): run make sdk-js", name, resp.StatusCode)
		}
	}
}

// browser is headless Chromium driven over the DevTools protocol (one WebSocket, flattened sessions), as
// sdk/js/test/browser.test.ts drives it.
type browser struct {
	c       *websocket.Conn
	mu      sync.Mutex
	id      int
	calls   map[int]chan cdpReply
	console []string
}

type cdpReply struct {
	Result json.RawMessage
	Err    error
}

func launchChromium(ctx context.Context, t *testing.T, chromium string) *browser {
	t.Helper()
	// Not t.TempDir: Chromium's helper processes may still write to the profile for a moment after the
	// browser is gone, which made TempDir's RemoveAll fail the test. The browser gets a process group of its
	// own, killed whole, and the profile is removed with retries.
	dir, err := os.MkdirTemp("", "warren-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--remote-debugging-port=0", "--user-data-dir="+dir, "--window-size=1280,900", "about:blank")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		var rerr error
		for i := 0; i < 20; i++ {
			if rerr = os.RemoveAll(dir); rerr == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("chromium profile %s not removed: %v", dir, rerr)
	})
	// Chromium prints "DevTools listening on ws://..." on stderr.
	found := make(chan string, 1)
	go func() {
		var seen bytes.Buffer
		buf := make([]byte, 4096)
		re := regexp.MustCompile(`DevTools listening on (ws://\S+)`)
		for {
			n, err := stderr.Read(buf)
			if seen.Len() < 1<<20 {
				seen.Write(buf[:n])
			}
			if m := re.FindSubmatch(seen.Bytes()); m != nil && found != nil {
				found <- string(m[1])
				found = nil
			}
			if err != nil {
				if found != nil {
					found <- "exited: " + tail(seen.String(), 2000)
				}
				return
			}
		}
	}()
	var url string
	select {
	case url = <-found:
	case <-ctx.Done():
		t.Fatal("chromium did not print its DevTools URL")
	}
	if !strings.HasPrefix(url, "ws://") {
		t.Fatalf("chromium: %s", url)
	}
	c, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(64 << 20)
	b := &browser{c: c, calls: map[int]chan cdpReply{}}
	go b.read()
	t.Cleanup(func() { _ = c.CloseNow() })
	return b
}

func (b *browser) read() {
	for {
		_, data, err := b.c.Read(context.Background())
		if err != nil {
			b.mu.Lock()
			for id, ch := range b.calls {
				ch <- cdpReply{Err: err}
				delete(b.calls, id)
			}
			b.mu.Unlock()
			return
		}
		var m struct {
			ID     int             `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(data, &m) != nil {
			continue
		}
		b.mu.Lock()
		switch {
		case m.ID != 0:
			if ch := b.calls[m.ID]; ch != nil {
				delete(b.calls, m.ID)
				r := cdpReply{Result: m.Result}
				if m.Error != nil {
					r.Err = errors.New(m.Error.Message)
				}
				ch <- r
			}
		case m.Method == "Runtime.consoleAPICalled" || m.Method == "Runtime.exceptionThrown":
			if len(b.console) < 1000 {
				b.console = append(b.console, m.Method+": "+tail(string(m.Params), 2000))
			}
		}
		b.mu.Unlock()
	}
}

func (b *browser) send(ctx context.Context, session, method string, params any) (json.RawMessage, error) {
	b.mu.Lock()
	b.id++
	id := b.id
	ch := make(chan cdpReply, 1)
	b.calls[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method, "params": params}
	if session != "" {
		msg["sessionId"] = session
	}
	data, _ := json.Marshal(msg)
	if err := b.c.Write(ctx, websocket.MessageText, data); err != nil {
		return nil, err
	}
	select {
	case r := <-ch:
		return r.Result, r.Err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// page is one tab.
type page struct {
	b       *browser
	session string
}

func (b *browser) newPage(ctx context.Context, t *testing.T) *page {
	t.Helper()
	var target struct{ TargetID string }
	var attached struct{ SessionID string }
	r, err := b.send(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"})
	if err == nil {
		err = json.Unmarshal(r, &target)
	}
	if err == nil {
		r, err = b.send(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true})
	}
	if err == nil {
		err = json.Unmarshal(r, &attached)
	}
	if err != nil {
		t.Fatalf("new page: %v", err)
	}
	p := &page{b: b, session: attached.SessionID}
	for _, m := range []string{"Runtime.enable", "Page.enable"} {
		if _, err := b.send(ctx, p.session, m, map[string]any{}); err != nil {
			t.Fatalf("%s: %v", m, err)
		}
	}
	if _, err := b.send(ctx, p.session, "Emulation.setDeviceMetricsOverride",
		map[string]any{"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": false}); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *page) navigate(ctx context.Context, t *testing.T, url string) {
	t.Helper()
	if _, err := p.b.send(ctx, p.session, "Page.navigate", map[string]any{"url": url}); err != nil {
		t.Fatalf("navigate %s: %v", url, err)
	}
}

// evalRaw evaluates expr (awaiting a promise) and returns its value as JSON.
func (p *page) evalRaw(ctx context.Context, expr string) (json.RawMessage, error) {
	r, err := p.b.send(ctx, p.session, "Runtime.evaluate", map[string]any{"expression": expr, "awaitPromise": true, "returnByValue": true})
	if err != nil {
		return nil, err
	}
	var out struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails json.RawMessage `json:"exceptionDetails"`
	}
	if err := json.Unmarshal(r, &out); err != nil {
		return nil, err
	}
	if out.ExceptionDetails != nil {
		return nil, fmt.Errorf("exception: %s", tail(string(out.ExceptionDetails), 2000))
	}
	return out.Result.Value, nil
}

func (p *page) eval(ctx context.Context, t *testing.T, expr string) {
	t.Helper()
	if _, err := p.evalRaw(ctx, expr); err != nil {
		p.fail(ctx, t, fmt.Sprintf("%s: %v", expr, err))
	}
}

func (p *page) evalInto(ctx context.Context, t *testing.T, expr string, v any) {
	t.Helper()
	raw, err := p.evalRaw(ctx, expr)
	if err == nil {
		err = json.Unmarshal(raw, v)
	}
	if err != nil {
		p.fail(ctx, t, fmt.Sprintf("%s: %v", expr, err))
	}
}

func (p *page) text(ctx context.Context, t *testing.T, selector string) string {
	t.Helper()
	var s string
	sel, _ := json.Marshal(selector)
	p.evalInto(ctx, t, fmt.Sprintf(`document.querySelector(%s)?.textContent ?? ""`, sel), &s)
	return s
}

// waitFor evaluates cond until it is true (a navigation in progress fails an evaluation: it is asked again);
// the test's context bounds the wait.
func (p *page) waitFor(ctx context.Context, t *testing.T, cond string) {
	t.Helper()
	for {
		raw, err := p.evalRaw(ctx, cond)
		if err == nil && string(raw) == "true" {
			return
		}
		if ctx.Err() != nil {
			p.fail(context.Background(), t, "waiting for "+cond)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// fail ends the test with the page's state and console.
func (p *page) fail(ctx context.Context, t *testing.T, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	body, _ := p.evalRaw(ctx, `document.body.dataset.state + "\n" + document.body.innerText`)
	p.b.mu.Lock()
	console := strings.Join(p.b.console, "\n")
	p.b.mu.Unlock()
	t.Fatalf("%s\npage: %s\nconsole:\n%s", what, tail(string(body), 4000), tail(console, 6000))
}

func (p *page) screenshot(ctx context.Context, t *testing.T) []byte {
	t.Helper()
	var out struct{ Data string }
	r, err := p.b.send(ctx, p.session, "Page.captureScreenshot", map[string]any{"format": "png"})
	if err == nil {
		err = json.Unmarshal(r, &out)
	}
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	png, err := base64.StdEncoding.DecodeString(out.Data)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("screenshot: not a PNG (%v)", err)
	}
	return png
}
