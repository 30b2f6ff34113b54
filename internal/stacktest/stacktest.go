// Package stacktest holds what the tests of the production topology (internal/prodstack, one region) and
// of two regions (internal/multiregion) share: `warren <role>` processes, the billing role with an issuer
// registered through its API, tokens, waits and agent turns. It is for tests only.
package stacktest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing/adminclient"
	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/secrets/vault"
	"github.com/warren-mesh/warren/internal/testenv"
	"github.com/warren-mesh/warren/internal/token"
	warren "github.com/warren-mesh/warren/sdk"
)

// Role is one `warren <role>` process.
type Role struct {
	Name    string
	Addr    string // the address of its ready line
	Metrics string // its -metrics-listen address, from the ready line; "" without one
	Cmd     *exec.Cmd
	Logs    *SyncBuffer // its stderr

	exited chan struct{}
}

// SyncBuffer is a bytes.Buffer safe for concurrent writes and reads.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// StartRole runs `warren <name> args...` (bin: testenv.WarrenBinary) with env added to the test's
// environment, in a temporary working directory of its own, and waits for its ready line. The process is
// stopped (SIGTERM, then SIGKILL after 20 s) when t ends, and its log shown when t failed.
func StartRole(t testing.TB, bin, name string, env []string, args ...string) *Role {
	t.Helper()
	return StartRoleFor(t, t, bin, name, env, args...)
}

// StartRoleFor is StartRole from a subtest t for a role that outlives it: owner (a parent test) stops it.
func StartRoleFor(t, owner testing.TB, bin, name string, env []string, args ...string) *Role {
	t.Helper()
	cmd := exec.Command(bin, append([]string{name}, args...)...)
	cmd.Dir = owner.TempDir() // what a role keeps in its working directory (the scheduler's spool) goes there
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	r := &Role{Name: name, Cmd: cmd, Logs: &SyncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = r.Logs
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start warren %s: %v", name, err)
	}
	type readyLine struct{ Event, Addr, Metrics string }
	ready := make(chan readyLine, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var l readyLine
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Event == "ready" {
				ready <- l
			}
		}
		_ = cmd.Wait()
		close(r.exited)
	}()
	owner.Cleanup(func() {
		r.Stop(20 * time.Second)
		if owner.Failed() {
			t.Logf("warren %s log:\n%s", name, Tail(r.Logs.String(), 8000))
		}
	})
	select {
	case l := <-ready:
		r.Addr, r.Metrics = l.Addr, l.Metrics
	case <-r.exited:
		t.Fatalf("warren %s exited before it was ready:\n%s", name, Tail(r.Logs.String(), 4000))
	case <-time.After(60 * time.Second):
		t.Fatalf("warren %s did not become ready:\n%s", name, Tail(r.Logs.String(), 4000))
	}
	return r
}

// Stop asks the role to stop (SIGTERM) and kills it after grace; it returns once the process has exited.
func (r *Role) Stop(grace time.Duration) {
	_ = r.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
	case <-time.After(grace):
		r.Kill()
	}
}

// Kill kills the role (SIGKILL), as a crash would end it, and waits until it has exited.
func (r *Role) Kill() {
	_ = r.Cmd.Process.Kill()
	<-r.exited
}

// Tail is the last n bytes of s.
func Tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// WaitFor polls ok every 100 ms until it holds, failing t after d.
func WaitFor(t testing.TB, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Turn prompts the session and returns the turn's result, failing t on an error or a turn without one.
func Turn(t testing.TB, ctx context.Context, s *warren.Session, prompt string) *warren.ResultEvent {
	t.Helper()
	for ev, err := range s.Prompt(ctx, prompt) {
		if err != nil {
			t.Fatalf("prompt %q: %v", prompt, err)
		}
		if r, ok := ev.Result(); ok {
			return r
		}
	}
	t.Fatalf("prompt %q: no result", prompt)
	return nil
}

// Billing is a `warren billing` process over Vault and the database, with the admin key an operator
// seeded in Vault.
type Billing struct {
	*Role
	Keys     *vault.Store // Vault as the roles see it
	adminKey string
}

// StartBilling seeds Vault with the billing API's admin key and starts `warren billing` over vs and the
// database dsn.
func StartBilling(t testing.TB, ctx context.Context, bin string, vs *testenv.VaultServer, dsn string) *Billing {
	t.Helper()
	return StartBillingWith(t, ctx, bin, vs, dsn, nil)
}

// StartBillingWith is StartBilling with env added to the process's environment and args to its flags (e.g.
// the S3 store of workspace templates: -s3-bucket and the AWS_* keys).
func StartBillingWith(t testing.TB, ctx context.Context, bin string, vs *testenv.VaultServer, dsn string, env []string, args ...string) *Billing {
	t.Helper()
	keys, err := vault.New(ctx, vault.Config{Addr: vs.Addr(), Token: vs.RootToken()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = keys.Close() })
	adminKey, _, err := keys.EnsureAdminKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := StartRole(t, bin, "billing", append(VaultEnv(vs), env...), append([]string{"-listen", "127.0.0.1:0", "-vault", vs.Addr(), "-db", dsn}, args...)...)
	return &Billing{Role: r, Keys: keys, adminKey: adminKey}
}

// VaultEnv is the environment of a role that logs in to vs with its root token.
func VaultEnv(vs *testenv.VaultServer) []string { return []string{"VAULT_TOKEN=" + vs.RootToken()} }

// AdminKey is the billing API's admin key (for a CLI's $WARREN_ADMIN_KEY).
func (b *Billing) AdminKey() string { return b.adminKey }

// Client is a client of the billing API with the admin key (billing/adminclient).
func (b *Billing) Client(t testing.TB) *adminclient.Client {
	t.Helper()
	c, err := adminclient.New(adminclient.Config{URL: "http://" + b.Addr, Key: b.adminKey, UserAgent: "warren-stacktest"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Admin calls the billing API with the admin key, body as the JSON request ("" for none), and returns the
// body of its 2xx answer.
func (b *Billing) Admin(t testing.TB, ctx context.Context, method, path, body string) []byte {
	t.Helper()
	var in any
	if body != "" {
		in = json.RawMessage(body)
	}
	var out json.RawMessage
	if err := b.Client(t).Call(ctx, method, path, nil, in, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// RegisterIssuer registers issuer iss through the billing API, as a platform team does, rotates its first
// key and returns it; it checks that the key is a text secret and that it landed in Vault.
func (b *Billing) RegisterIssuer(t testing.TB, ctx context.Context, iss string) secrets.Key {
	t.Helper()
	b.Admin(t, ctx, http.MethodPut, "/v1/issuers/"+iss, `{"name":"`+iss+`"}`)
	var k struct{ Kid, Secret string }
	if err := json.Unmarshal(b.Admin(t, ctx, http.MethodPost, "/v1/issuers/"+iss+"/keys", ``), &k); err != nil {
		t.Fatal(err)
	}
	// The secret is a text secret the customer's JWT library signs with as given (its UTF-8 bytes).
	if !secrets.ValidTextSecret(k.Secret) {
		t.Fatalf("the admin API answered a %d-char secret that is not a wsk_ text secret", len(k.Secret))
	}
	if got, err := b.Keys.IssuerKeys(ctx, iss); err != nil || got[0].ID != k.Kid || got[0].Form != secrets.FormText {
		t.Fatalf("Vault has %+v, %v; want key %s", got, err, k.Kid)
	}
	return secrets.Key{ID: k.Kid, Secret: []byte(k.Secret)}
}

// Mint is a token of user under key's issuer iss, valid for an hour, with $5 and an hour of compute for
// its lifetime.
func Mint(t testing.TB, key secrets.Key, iss, user string) string {
	t.Helper()
	tok, err := token.Mint(key, token.Claims{Issuer: iss, Subject: user,
		ExpiresAt: time.Now().Add(time.Hour), HasBudget: true,
		Budget: token.Budget{AIMicros: 5_000_000, ComputeSeconds: 3600, Window: "lifetime"}})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// KilledTurn reads the turn just sent on s — a long streamed answer (modelserver.LongPrompt or the "long"
// scenario, with SessionOptions.IncludePartialMessages) — to its result, calling kill once after the fifth
// text delta, and checks that the reader saw it whole across whatever kill broke: seqs strictly increase
// (nothing repeated or out of order), exactly gaps seqs are missing (the reconnect's handshake, which is
// not delivered), and the 200 deltas add up to the assistant's text. It returns the seq at which kill ran.
func KilledTurn(t testing.TB, ctx context.Context, s *warren.Session, gaps int64, kill func()) (killedAt int64) {
	t.Helper()
	var got []warren.Event
	var deltas, text strings.Builder
	nDeltas := 0
	for {
		ev, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("Next after %d events (killed at seq %d): %v", len(got), killedAt, err)
		}
		got = append(got, ev)
		if se, ok := ev.StreamEvent(); ok {
			if d, ok := se.TextDelta(); ok {
				deltas.WriteString(d)
				nDeltas++
				if nDeltas == 5 {
					killedAt = ev.Seq
					kill() // mid-turn: 195 deltas to go
				}
			}
		}
		if m, ok := ev.Assistant(); ok {
			text.WriteString(m.Text())
		}
		if r, ok := ev.Result(); ok {
			if r.IsError {
				t.Fatalf("result: %s", ev.Raw)
			}
			break
		}
	}
	if killedAt == 0 {
		t.Fatal("the turn streamed no text deltas")
	}
	missing := int64(0)
	for i := 1; i < len(got); i++ {
		d := got[i].Seq - got[i-1].Seq
		if d <= 0 {
			t.Fatalf("seq %d after %d: a message duplicated or out of order", got[i].Seq, got[i-1].Seq)
		}
		missing += d - 1
	}
	if missing != gaps {
		t.Fatalf("%d seqs missing from the stream, want %d (the reconnect's ready and session_info)", missing, gaps)
	}
	if nDeltas != 200 || deltas.String() != text.String() {
		t.Fatalf("%d text deltas %q\nassistant text %q", nDeltas, deltas.String(), text.String())
	}
	return killedAt
}

// LostAndReconnected reads a session's failover events (Failover.OnEvent sent them on events) until it has
// seen a lost and a reconnected one, and checks them: the connection to lost was lost, the session
// reconnected through reached, after the seq killedAt or later.
func LostAndReconnected(t testing.TB, events <-chan warren.FailoverEvent, lost, reached string, killedAt int64) {
	t.Helper()
	var l, re warren.FailoverEvent
	for l.Kind == "" || re.Kind == "" {
		switch ev := <-events; ev.Kind {
		case warren.FailoverLost:
			l = ev
		case warren.FailoverReconnected:
			re = ev
		}
	}
	if l.Edge != lost || re.Edge != reached || re.LastSeq < killedAt {
		t.Fatalf("lost %v, reconnected %v (killed at seq %d); want lost %s, reconnected through %s", l, re, killedAt, lost, reached)
	}
}
