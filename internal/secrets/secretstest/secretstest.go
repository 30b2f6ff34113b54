// Package secretstest is the contract suite of the Secrets port's stores (internal/secrets/file,
// internal/secrets/vault): what IssuerKeys answers, how issuers are created and rotated, which issuer ids
// are refused, and, for stores behind a server, what an outage looks like. Each adapter's tests call Run.
package secretstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/secrets"
)

// Subject is one store under test with its writers, as Run's open function hands it over, freshly made and
// empty: no issuer exists yet.
type Subject struct {
	Store        secrets.Store
	CreateIssuer func(issuer string) (secrets.Key, error)
	Rotate       func(issuer string) (secrets.Key, error)

	// ErrExists is what CreateIssuer of an existing issuer wraps; ErrInvalid what the writers wrap for an
	// issuer id outside the token package's rule. Required.
	ErrExists, ErrInvalid error
	// ErrConflict, when set, is what a rotation racing others of the same issuer may fail with (a store
	// that uses check-and-set and gives up); nil means every concurrent rotation must succeed.
	ErrConflict error

	// Stop and Start, when set, take the store's server down and bring it back; nil for a store without a
	// server. Volatile says the server comes back empty (a Vault dev server), so the suite writes its issuer
	// again after Start.
	Stop, Start func(t *testing.T)
	Volatile    bool
}

// Run runs the contract suite; open is called once per subtest.
func Run(t *testing.T, open func(t *testing.T) Subject) {
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, Subject)
	}{
		{"UnknownIssuer", testUnknownIssuer},
		{"Create", testCreate},
		{"CreateTwice", testCreateTwice},
		{"Rotate", testRotate},
		{"RotateUnknown", testRotateUnknown},
		{"ConcurrentRotations", testConcurrentRotations},
		{"IndependentIssuers", testIndependentIssuers},
		{"UnusualIssuerIDs", testUnusualIssuerIDs},
		{"InvalidIssuerIDs", testInvalidIssuerIDs},
		{"Outage", testOutage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			if s.Store == nil || s.CreateIssuer == nil || s.Rotate == nil || s.ErrExists == nil || s.ErrInvalid == nil {
				t.Fatal("secretstest: Subject needs Store, CreateIssuer, Rotate, ErrExists and ErrInvalid")
			}
			tc.fn(t, s)
		})
	}
}

// MinSecretSize is the least length of a generated key: 256 bits.
const MinSecretSize = 32

// callTimeout bounds every call the suite makes: a store must answer, with an error if it must, well within
// it. Generous, as the machines running the suite are small and shared.
const callTimeout = 60 * time.Second

// within runs fn and fails t if it has not returned after callTimeout.
func within[T any](t *testing.T, what string, fn func() (T, error)) (T, error) {
	t.Helper()
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := fn()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-time.After(callTimeout):
		t.Fatalf("%s did not return within %v", what, callTimeout)
		panic("unreachable")
	}
}

func keys(t *testing.T, s Subject, issuer string) []secrets.Key {
	t.Helper()
	ks, err := within(t, "IssuerKeys", func() ([]secrets.Key, error) { return s.Store.IssuerKeys(context.Background(), issuer) })
	if err != nil {
		t.Fatalf("IssuerKeys(%q): %v", issuer, err)
	}
	if len(ks) == 0 {
		t.Fatalf("IssuerKeys(%q): no keys and no error", issuer)
	}
	return ks
}

func create(t *testing.T, s Subject, issuer string) secrets.Key {
	t.Helper()
	k, err := within(t, "CreateIssuer", func() (secrets.Key, error) { return s.CreateIssuer(issuer) })
	if err != nil {
		t.Fatalf("CreateIssuer(%q): %v", issuer, err)
	}
	checkKey(t, issuer, k, 1)
	return k
}

func rotate(t *testing.T, s Subject, issuer string, version int) secrets.Key {
	t.Helper()
	k, err := within(t, "Rotate", func() (secrets.Key, error) { return s.Rotate(issuer) })
	if err != nil {
		t.Fatalf("Rotate(%q): %v", issuer, err)
	}
	checkKey(t, issuer, k, version)
	return k
}

// checkKey checks a key the writers returned: id "<issuer>-v<version>" (the same in every store, so tokens
// minted in dev and production look alike) and a text secret (docs/PROTOCOL.md#tokens) of at least
// MinSecretSize bytes, which reads back as the same key.
func checkKey(t *testing.T, issuer string, k secrets.Key, version int) {
	t.Helper()
	if want := keyID(issuer, version); k.ID != want {
		t.Fatalf("key id %q, want %q", k.ID, want)
	}
	if len(k.Secret) < MinSecretSize {
		t.Fatalf("key %s: %d-byte secret, want at least %d", k.ID, len(k.Secret), MinSecretSize)
	}
	if k.Form != secrets.FormText || !secrets.ValidTextSecret(string(k.Secret)) {
		t.Fatalf("key %s: form %v, want a %s text secret", k.ID, k.Form, secrets.TextSecretPrefix)
	}
	if back, err := secrets.KeyFromStored(k.ID, k.Given(), MinSecretSize); err != nil || back.Form != k.Form || !bytes.Equal(back.Secret, k.Secret) {
		t.Fatalf("key %s does not read back from the string given out: %v", k.ID, err)
	}
}

func keyID(issuer string, version int) string { return issuer + "-v" + strconv.Itoa(version) }

// wantHead checks that ks starts with want (current first, then previous), ids and secrets alike.
func wantHead(t *testing.T, ks []secrets.Key, want ...secrets.Key) {
	t.Helper()
	if len(ks) < len(want) {
		t.Fatalf("got keys %v, want at least %v", ids(ks), ids(want))
	}
	for i, w := range want {
		if ks[i].ID != w.ID || !bytes.Equal(ks[i].Secret, w.Secret) {
			t.Fatalf("key %d is %s, want %s (keys %v, same secret: %v)", i, ks[i].ID, w.ID, ids(ks), bytes.Equal(ks[i].Secret, w.Secret))
		}
	}
}

func ids(ks []secrets.Key) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = k.ID
	}
	return out
}

func wantUnknown(t *testing.T, err error, what string) {
	t.Helper()
	if !errors.Is(err, secrets.ErrUnknownIssuer) || errors.Is(err, secrets.ErrUnavailable) {
		t.Fatalf("%s: %v, want ErrUnknownIssuer (and not ErrUnavailable)", what, err)
	}
}

func testUnknownIssuer(t *testing.T, s Subject) {
	_, err := within(t, "IssuerKeys", func() ([]secrets.Key, error) { return s.Store.IssuerKeys(context.Background(), "nobody") })
	wantUnknown(t, err, `IssuerKeys("nobody")`)
}

func testCreate(t *testing.T, s Subject) {
	k := create(t, s, "acme")
	ks := keys(t, s, "acme")
	if len(ks) != 1 {
		t.Fatalf("keys of a new issuer: %v, want one", ids(ks))
	}
	wantHead(t, ks, k)
}

func testCreateTwice(t *testing.T, s Subject) {
	k := create(t, s, "acme")
	_, err := within(t, "CreateIssuer", func() (secrets.Key, error) { return s.CreateIssuer("acme") })
	if !errors.Is(err, s.ErrExists) {
		t.Fatalf("second CreateIssuer: %v, want %v", err, s.ErrExists)
	}
	ks := keys(t, s, "acme")
	if len(ks) != 1 {
		t.Fatalf("keys after a refused create: %v", ids(ks))
	}
	wantHead(t, ks, k)
}

func testRotate(t *testing.T, s Subject) {
	k1 := create(t, s, "acme")
	k2 := rotate(t, s, "acme", 2)
	if bytes.Equal(k1.Secret, k2.Secret) {
		t.Fatal("rotation kept the secret")
	}
	wantHead(t, keys(t, s, "acme"), k2, k1)
	k3 := rotate(t, s, "acme", 3)
	wantHead(t, keys(t, s, "acme"), k3, k2)
}

func testRotateUnknown(t *testing.T, s Subject) {
	_, err := within(t, "Rotate", func() (secrets.Key, error) { return s.Rotate("nobody") })
	wantUnknown(t, err, `Rotate("nobody")`)
	_, err = within(t, "IssuerKeys", func() ([]secrets.Key, error) { return s.Store.IssuerKeys(context.Background(), "nobody") })
	wantUnknown(t, err, "IssuerKeys after a refused rotation")
}

// Rotations racing each other never hand out the same version twice nor lose one: the versions returned are
// exactly 2..n+1 for n successes, and the newest is current.
func testConcurrentRotations(t *testing.T, s Subject) {
	const racers = 8
	k1 := create(t, s, "acme")
	var mu sync.Mutex
	var won []secrets.Key
	var wg sync.WaitGroup
	for range racers {
		wg.Go(func() {
			k, err := s.Rotate("acme")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won = append(won, k)
			case s.ErrConflict != nil && errors.Is(err, s.ErrConflict):
			default:
				t.Errorf("concurrent Rotate: %v", err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if len(won) == 0 {
		t.Fatal("no concurrent rotation succeeded")
	}
	slices.SortFunc(won, func(a, b secrets.Key) int { return version(t, b) - version(t, a) })
	for i, k := range won {
		checkKey(t, "acme", k, len(won)+1-i)
		for _, other := range won[:i] {
			if bytes.Equal(k.Secret, other.Secret) {
				t.Fatalf("rotations %s and %s returned the same secret", k.ID, other.ID)
			}
		}
	}
	want := []secrets.Key{won[0], k1}
	if len(won) > 1 {
		want[1] = won[1]
	}
	wantHead(t, keys(t, s, "acme"), want...)
	t.Logf("%d of %d concurrent rotations succeeded", len(won), racers)
}

func version(t *testing.T, k secrets.Key) int {
	t.Helper()
	i := strings.LastIndex(k.ID, "-v")
	if i < 0 {
		t.Fatalf("key id %q has no version", k.ID)
	}
	n, err := strconv.Atoi(k.ID[i+2:])
	if err != nil {
		t.Fatalf("key id %q has no version", k.ID)
	}
	return n
}

func testIndependentIssuers(t *testing.T, s Subject) {
	a1, b1 := create(t, s, "alpha"), create(t, s, "beta")
	if bytes.Equal(a1.Secret, b1.Secret) {
		t.Fatal("two issuers got the same secret")
	}
	a2 := rotate(t, s, "alpha", 2)
	wantHead(t, keys(t, s, "alpha"), a2, a1)
	if ks := keys(t, s, "beta"); len(ks) != 1 {
		t.Fatalf("rotating alpha changed beta: %v", ids(ks))
	} else {
		wantHead(t, ks, b1)
	}
	b2 := rotate(t, s, "beta", 2)
	wantHead(t, keys(t, s, "beta"), b2, b1)
	wantHead(t, keys(t, s, "alpha"), a2, a1)
}

// Issuer ids are any printable UTF-8 up to 256 bytes: ids that look like paths, escapes or each other's
// prefixes are distinct issuers, each with its own key.
func testUnusualIssuerIDs(t *testing.T, s Subject) {
	names := []string{
		"a", "a/b", "a/b/..", "..", ".", "./a", "a/", "/a", "A", "a b", "Acme Corp", "a%2Fb", "%2e%2e", "~a",
		"~YQ", "a?b#c", "a\\b", "a-v1", "日本語", "ünïcödé", "😀", "a:b@c", strings.Repeat("x", 256),
		strings.Repeat("é", 128),
	}
	created := map[string]secrets.Key{}
	for _, name := range names {
		created[name] = create(t, s, name)
	}
	for _, name := range names {
		ks := keys(t, s, name)
		if len(ks) != 1 {
			t.Fatalf("issuer %q: keys %v, want one", name, ids(ks))
		}
		wantHead(t, ks, created[name])
	}
	r := rotate(t, s, "a/b", 2)
	wantHead(t, keys(t, s, "a/b"), r, created["a/b"])
	for _, other := range []string{"a", "a/b/..", "a%2Fb"} {
		if ks := keys(t, s, other); len(ks) != 1 {
			t.Fatalf("rotating %q changed %q: %v", "a/b", other, ids(ks))
		}
	}
}

func testInvalidIssuerIDs(t *testing.T, s Subject) {
	for _, name := range []string{
		"", "a\x00b", "a\nb", "\tx", "a\x7fb", "a\u200bb", "\ufeffa", "a\u202eb", "\xff", "a\xc3",
		strings.Repeat("x", 257),
	} {
		label := fmt.Sprintf("%q", name)
		if len(label) > 40 {
			label = fmt.Sprintf("%d bytes", len(name))
		}
		t.Run(label, func(t *testing.T) {
			_, err := within(t, "CreateIssuer", func() (secrets.Key, error) { return s.CreateIssuer(name) })
			if !errors.Is(err, s.ErrInvalid) {
				t.Fatalf("CreateIssuer: %v, want %v", err, s.ErrInvalid)
			}
			_, err = within(t, "Rotate", func() (secrets.Key, error) { return s.Rotate(name) })
			if !errors.Is(err, s.ErrInvalid) {
				t.Fatalf("Rotate: %v, want %v", err, s.ErrInvalid)
			}
			_, err = within(t, "IssuerKeys", func() ([]secrets.Key, error) { return s.Store.IssuerKeys(context.Background(), name) })
			wantUnknown(t, err, "IssuerKeys")
		})
	}
}

// While the server is down every call fails with ErrUnavailable, in bounded time; once it is back the store
// works again without being reopened.
func testOutage(t *testing.T, s Subject) {
	if s.Stop == nil || s.Start == nil {
		t.Skip("the store has no server to stop")
	}
	k1 := create(t, s, "acme")
	s.Stop(t)
	_, err := within(t, "IssuerKeys", func() ([]secrets.Key, error) { return s.Store.IssuerKeys(context.Background(), "acme") })
	wantUnavailable(t, err, "IssuerKeys of a known issuer")
	_, err = within(t, "IssuerKeys", func() ([]secrets.Key, error) { return s.Store.IssuerKeys(context.Background(), "nobody") })
	wantUnavailable(t, err, "IssuerKeys of an unknown issuer")
	_, err = within(t, "Rotate", func() (secrets.Key, error) { return s.Rotate("acme") })
	wantUnavailable(t, err, "Rotate")
	_, err = within(t, "CreateIssuer", func() (secrets.Key, error) { return s.CreateIssuer("beta") })
	wantUnavailable(t, err, "CreateIssuer")

	s.Start(t)
	deadline := time.Now().Add(callTimeout)
	for {
		ks, err := within(t, "IssuerKeys", func() ([]secrets.Key, error) { return s.Store.IssuerKeys(context.Background(), "acme") })
		switch {
		case err == nil && !s.Volatile:
			wantHead(t, ks, k1)
		case err == nil:
			t.Fatalf("a volatile server came back with keys %v", ids(ks))
		case errors.Is(err, secrets.ErrUnavailable) && time.Now().Before(deadline):
			time.Sleep(100 * time.Millisecond)
			continue
		case s.Volatile && errors.Is(err, secrets.ErrUnknownIssuer):
			k1 = create(t, s, "acme") // the server lost its data: write the issuer again
		default:
			t.Fatalf("IssuerKeys after the server came back: %v", err)
		}
		break
	}
	k2 := rotate(t, s, "acme", 2)
	wantHead(t, keys(t, s, "acme"), k2, k1)
}

func wantUnavailable(t *testing.T, err error, what string) {
	t.Helper()
	if !errors.Is(err, secrets.ErrUnavailable) || errors.Is(err, secrets.ErrUnknownIssuer) {
		t.Fatalf("%s with the server down: %v, want ErrUnavailable", what, err)
	}
}
