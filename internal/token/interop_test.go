package token_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/secrets/file"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/tools"
)

// The interop tests mint tokens with other languages' JWT libraries exactly as a customer's backend does
// (README: Minting tokens): the issuer secret as given, a string, passed to the library unchanged. The
// secret reaches the child process through its environment, never its command line.

// nodeMint signs $CLAIMS with jsonwebtoken. With $SECRET_BASE64 set it decodes the secret first, as a
// customer holding a legacy base64 key had to.
const nodeMint = `
const jwt = require('jsonwebtoken');
const secret = process.env.SECRET_BASE64 ? Buffer.from(process.env.SECRET, 'base64') : process.env.SECRET;
const opts = { algorithm: 'HS256' };
if (process.env.KID) opts.keyid = process.env.KID;
process.stdout.write(jwt.sign(JSON.parse(process.env.CLAIMS), secret, opts));
`

// pythonMint signs $CLAIMS with PyJWT.
const pythonMint = `
import json, os, sys, jwt
headers = {"kid": os.environ["KID"]} if os.environ.get("KID") else None
tok = jwt.encode(json.loads(os.environ["CLAIMS"]), os.environ["SECRET"], algorithm="HS256", headers=headers)
sys.stdout.write(tok if isinstance(tok, str) else tok.decode())
`

// minter runs one language's snippet.
type minter struct {
	lang string
	cmd  func(t *testing.T) *exec.Cmd
}

func interopMinters(t *testing.T) []minter {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: no external JWT libraries")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed: run `make tools` (jwt-libs)")
	}
	modules := tools.NodeModulesJWT()
	if modules == "" {
		t.Fatalf("jsonwebtoken is not in %s: run `make tools` (jwt-libs)", filepath.Join(tools.Dir(), "jwt-node"))
	}
	python := pythonWithJWT()
	if python == "" {
		t.Fatal("no python3 with PyJWT (Debian python3-jwt for /usr/bin/python3): run `make tools` (jwt-libs)")
	}
	return []minter{
		{"node jsonwebtoken", func(*testing.T) *exec.Cmd {
			c := exec.Command(node, "-e", nodeMint)
			c.Env = append(os.Environ(), "NODE_PATH="+modules)
			return c
		}},
		{"python PyJWT", func(*testing.T) *exec.Cmd { return exec.Command(python, "-c", pythonMint) }},
	}
}

// pythonWithJWT is the first python3 that imports jwt: Debian's (where python3-jwt installs), then PATH's.
func pythonWithJWT() string {
	candidates := []string{"/usr/bin/python3"}
	if p, err := exec.LookPath("python3"); err == nil {
		candidates = append(candidates, p)
	}
	for _, p := range candidates {
		if exec.Command(p, "-c", "import jwt").Run() == nil {
			return p
		}
	}
	return ""
}

// run mints a token for claims with secret (and kid, and extra env) and returns it.
func (m minter) run(t *testing.T, secret, kid string, claims map[string]any, env ...string) string {
	t.Helper()
	body, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	c := m.cmd(t)
	if c.Env == nil {
		c.Env = os.Environ()
	}
	c.Env = append(c.Env, append([]string{"SECRET=" + secret, "KID=" + kid, "CLAIMS=" + string(body)}, env...)...)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", m.lang, err, strings.ReplaceAll(stderr.String(), secret, "SECRET"))
	}
	return strings.TrimSpace(stdout.String())
}

// interopClaims are the claims Warren needs (docs/PROTOCOL.md#tokens), as a customer's backend writes them.
func interopClaims(sub string) map[string]any {
	now := time.Now()
	return map[string]any{
		"iss": "acme", "sub": sub, "aud": "warren-interop",
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
		"budget": map[string]any{
			"ai": 5_000_000, "compute": 3600, "window": "day",
			"windowStart": token.WindowDay.Start(now).Format(time.RFC3339),
		},
		"permissions": map[string]any{"maxTurns": 10, "blockedTools": []string{"WebFetch"}},
	}
}

// Tokens minted by jsonwebtoken (Node) and PyJWT (Python) with a text secret, as the store hands it out,
// pass the verifier the edge runs; after a rotation the previous secret's tokens still do.
func TestInteropTextSecret(t *testing.T) {
	minters := interopMinters(t)
	store, err := file.Open(filepath.Join(t.TempDir(), file.DefaultFileName))
	if err != nil {
		t.Fatal(err)
	}
	v1, err := store.CreateIssuer("acme")
	if err != nil {
		t.Fatal(err)
	}
	v := token.NewVerifier(secrets.NewCache(store, secrets.CacheOptions{MinRefresh: time.Nanosecond}), token.VerifierOptions{Audience: "warren-interop"})
	ctx := context.Background()
	verify := func(t *testing.T, m minter, tok, sub string) {
		t.Helper()
		c, err := v.Verify(ctx, tok)
		if err != nil {
			t.Fatalf("%s token refused: %v", m.lang, err)
		}
		if c.Subject != sub || c.Budget.AIMicros != 5_000_000 || c.Budget.Window != token.WindowDay ||
			c.Permissions.MaxTurns != 10 || len(c.Audience) != 1 {
			t.Fatalf("%s token claims %+v", m.lang, c)
		}
	}
	var beforeRotation []string
	for _, m := range minters {
		for _, kid := range []string{v1.ID, ""} {
			tok := m.run(t, v1.Given(), kid, interopClaims("alice"))
			verify(t, m, tok, "alice")
			beforeRotation = append(beforeRotation, tok)
		}
	}

	v2, err := store.Rotate("acme")
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range beforeRotation {
		if _, err := v.Verify(ctx, tok); err != nil {
			t.Fatalf("a token of the previous text secret after rotation: %v", err)
		}
	}
	for _, m := range minters {
		verify(t, m, m.run(t, v2.Given(), v2.ID, interopClaims("bob")), "bob")
		// The new secret under the old kid is refused: kid selects the key.
		if _, err := v.Verify(ctx, m.run(t, v2.Given(), v1.ID, interopClaims("bob"))); token.Reason(err) != "bad_signature" {
			t.Fatalf("%s: new secret under the previous kid: %v", m.lang, err)
		}
	}
}

// A legacy base64 key still verifies tokens a library signs with its decoded bytes (what its customers do),
// and refuses those signed with its base64 text.
func TestInteropLegacyKey(t *testing.T) {
	minters := interopMinters(t)
	raw := bytes.Repeat([]byte{0xa5, 0x3c}, 16)
	b64 := base64.StdEncoding.EncodeToString(raw)
	v := token.NewVerifier(legacyStore(t, raw), token.VerifierOptions{Audience: "warren-interop"})
	node := minters[0]
	if _, err := v.Verify(context.Background(), node.run(t, b64, "acme-v1", interopClaims("alice"), "SECRET_BASE64=1")); err != nil {
		t.Fatalf("legacy key, token signed over the decoded bytes: %v", err)
	}
	for _, m := range minters {
		if _, err := v.Verify(context.Background(), m.run(t, b64, "acme-v1", interopClaims("alice"))); token.Reason(err) != "bad_signature" {
			t.Fatalf("%s: legacy key's base64 text used as the secret: %v, want bad_signature", m.lang, err)
		}
	}
}

// The README's Node and Python examples (## Minting tokens), run as written with the secret in
// $WARREN_ISSUER_SECRET, mint tokens the verifier accepts: the documentation cannot drift from what works.
func TestInteropReadmeExamples(t *testing.T) {
	minters := interopMinters(t)
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	section, _, _ := strings.Cut(string(readme[strings.Index(string(readme), "## Minting tokens"):]), "\n## ")
	example := func(lang string) string {
		_, rest, ok := strings.Cut(section, "```"+lang+"\n")
		code, _, closed := strings.Cut(rest, "```")
		if !ok || !closed {
			t.Fatalf("README ## Minting tokens has no ```%s example", lang)
		}
		return code
	}
	key, err := secrets.NewTextKey("acme-v1")
	if err != nil {
		t.Fatal(err)
	}
	v := token.NewVerifier(storedStore{"acme": {key.Given()}}, token.VerifierOptions{})
	for _, tc := range []struct {
		m    minter
		code string
	}{
		{minters[0], "const userId = 'alice';\n" + example("js") + "\nprocess.stdout.write(token);\n"},
		{minters[1], "user_id = 'alice'\n" + example("python") + "\nimport sys\nsys.stdout.write(token)\n"},
	} {
		c := tc.m.cmd(t)
		c.Args[len(c.Args)-1] = tc.code // the snippet instead of the minter's own script
		c.Env = append(c.Environ(), "WARREN_ISSUER_SECRET="+key.Given())
		out, err := c.Output()
		if err != nil {
			t.Fatalf("%s README example: %v", tc.m.lang, err)
		}
		claims, err := v.Verify(context.Background(), strings.TrimSpace(string(out)))
		if err != nil {
			t.Fatalf("%s README example's token: %v", tc.m.lang, err)
		}
		if claims.Subject != "alice" || claims.Budget.AIMicros != 5_000_000 || !claims.Budget.WindowStart.Equal(token.WindowDay.Start(claims.ExpiresAt.Add(-time.Hour))) {
			t.Fatalf("%s README example's claims: %+v", tc.m.lang, claims)
		}
	}
}
