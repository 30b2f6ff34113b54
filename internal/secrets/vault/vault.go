// Package vault is the production Secrets store (docs/ARCHITECTURE.md#ports-and-adapters): issuer HMAC keys,
// the billing API's admin keys and the model API key in Vault's KV v2 engine, where each version of a secret
// is one version of the key, so a rotation is a write and the key id "<issuer>-v<version>" is the KV version
// (the file store uses the same ids, so tokens minted in dev and production look alike).
//
// IssuerKeys answers the current version and, for PreviousGrace after a rotation, the previous one. The Store
// logs in with a static token, AppRole, or a JWT (Nomad workload identity), keeps its token renewed in the
// background and logs in again when it cannot; wrap it in a secrets.Cache, which keeps serving fetched keys
// through a Vault outage until their TTL.
package vault

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	vaultapi "github.com/hashicorp/vault/api"

	"github.com/warren-mesh/warren/internal/secrets"
)

// Defaults of Config.
const (
	DefaultMount         = "secret"
	DefaultPrefix        = "warren"
	DefaultAppRoleMount  = "approle"
	DefaultJWTMount      = "jwt"
	DefaultPreviousGrace = 24 * time.Hour
	DefaultTimeout       = 10 * time.Second
)

// MinSecretSize is the least length of a legacy (base64) issuer key read from Vault, and of a generated admin
// key's random part (256 bits, the HS256 block-size guidance). A shorter key written by hand is refused as
// ErrMalformed rather than used. New issuer keys are text secrets (secrets.NewTextSecret), checked by
// secrets.KeyFromStored.
const MinSecretSize = 32

// Config says where the secrets are and how to log in. Exactly one of Token, AppRole and JWT is set.
type Config struct {
	Addr      string // Vault's URL, e.g. https://vault.service.consul:8200; required
	Mount     string // the KV v2 mount; DefaultMount when empty
	Prefix    string // the folder of Warren's secrets in the mount; DefaultPrefix when empty
	Namespace string // Vault Enterprise namespace; none when empty
	CACert    string // PEM file of the CA that signed Vault's certificate; the system pool when empty

	Token   string   // a static token; renewed while it is renewable, never replaced
	AppRole *AppRole // log in with AppRole
	JWT     *JWT     // log in with a JWT, e.g. a Nomad workload identity

	// PreviousGrace is how long the previous version of a key stays valid after the version replacing it was
	// written; DefaultPreviousGrace when zero.
	PreviousGrace time.Duration
	// Timeout bounds one request to Vault, and each write (CreateIssuer and Rotate take no context);
	// DefaultTimeout when zero.
	Timeout time.Duration
	Logger  *slog.Logger     // discards when nil
	Now     func() time.Time // the clock versions' ages are measured with; time.Now when nil
}

// AppRole is an AppRole login: POST auth/<Mount>/login {role_id, secret_id}.
type AppRole struct {
	Mount    string // DefaultAppRoleMount when empty
	RoleID   string
	SecretID string
}

// JWT is a JWT login: POST auth/<Mount>/login {role, jwt}. JWTFile is read again at every login, so a token
// that Nomad rotates in the task's secrets directory is picked up.
type JWT struct {
	Mount   string // DefaultJWTMount when empty
	Role    string
	JWT     string // the token itself, or
	JWTFile string // a file holding it
}

// Store is a secrets.Store over Vault KV v2. Safe for concurrent use; Close stops its background login.
type Store struct {
	cfg    Config
	log    *slog.Logger
	client *vaultapi.Client // carries the token
	login  *vaultapi.Client // never carries a token; nil with a static token
	// wall is the real clock, for token lifetimes, which Vault measures whatever Config.Now says.
	wall func() time.Time

	loginMu  sync.Mutex // serializes logins made by calls that found the token expired
	mu       sync.Mutex
	authErr  error     // set while there is no token yet: why the login failed
	expiry   time.Time // when the token expires; zero when it does not, or is not known
	loginErr error     // the last failed login since the last success, for errors past expiry

	cancel    context.CancelFunc
	done      chan struct{}
	transport *http.Transport
	closeOnce sync.Once
}

var _ secrets.Store = (*Store)(nil)

// Client is the Vault client carrying the Store's token, which the Store keeps renewed (and logs in again
// for): other Vault engines the process uses, such as the edge's mesh certificates from the PKI engine,
// share its login. Valid until Close.
func (s *Store) Client() *vaultapi.Client { return s.client }

// New validates cfg and connects. A login method logs in once before New returns: a refusal (wrong role,
// secret id or JWT) is an error wrapping ErrLogin; Vault being unreachable is not an error, the Store keeps
// trying in the background and its calls are secrets.ErrUnavailable meanwhile. New itself reads no
// environment variable.
func New(ctx context.Context, cfg Config) (*Store, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	transport := &http.Transport{
		Proxy:                 nil, // no HTTP_PROXY from the environment: Vault is reached directly
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
	}
	apiCfg := &vaultapi.Config{
		Address: cfg.Addr,
		HttpClient: &http.Client{
			Transport: transport,
			// The Vault client follows Vault's redirects itself.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		Timeout:      cfg.Timeout,
		MaxRetries:   2,
		MinRetryWait: 250 * time.Millisecond,
		MaxRetryWait: time.Second,
		Backoff:      linearBackoff,
	}
	if cfg.CACert != "" {
		if err := apiCfg.ConfigureTLS(&vaultapi.TLSConfig{CACert: cfg.CACert}); err != nil {
			return nil, fmt.Errorf("vault CA %s: %w", cfg.CACert, err)
		}
	}
	client, err := newClient(apiCfg, cfg.Namespace)
	if err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, log: cfg.Logger, client: client, wall: time.Now, transport: transport, done: make(chan struct{})}
	var first *vaultapi.Secret
	if cfg.Token != "" {
		client.SetToken(cfg.Token)
	} else {
		if s.login, err = newClient(client.CloneConfig(), cfg.Namespace); err != nil {
			return nil, err
		}
		first, err = s.authenticate(ctx)
		switch {
		case errors.Is(err, secrets.ErrUnavailable):
			s.log.Warn("vault login failed; retrying in the background", "method", s.method(), "err", err)
			s.authErr = err
		case err != nil:
			transport.CloseIdleConnections()
			return nil, err
		}
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.run(runCtx, first)
	return s, nil
}

// newClient makes a Vault client that carries nothing from the environment (vaultapi.NewClient reads
// VAULT_TOKEN, VAULT_NAMESPACE and VAULT_HEADERS).
func newClient(cfg *vaultapi.Config, namespace string) (*vaultapi.Client, error) {
	c, err := vaultapi.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("vault client: %w", err)
	}
	c.ClearToken()
	h := http.Header{}
	h.Set(vaultapi.RequestHeaderName, "true")
	if namespace != "" {
		h.Set(vaultapi.NamespaceHeaderName, namespace)
	}
	c.SetHeaders(h)
	return c, nil
}

// linearBackoff waits lo, 2*lo, ... up to hi between the client's retries.
func linearBackoff(lo, hi time.Duration, attempt int, _ *http.Response) time.Duration {
	return min(time.Duration(attempt+1)*lo, hi)
}

func (c Config) withDefaults() (Config, error) {
	if c.Addr == "" {
		return c, errors.New("vault config: Addr is required")
	}
	if c.Mount == "" {
		c.Mount = DefaultMount
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if !validMountPath(c.Mount) || !validMountPath(c.Prefix) {
		return c, fmt.Errorf("vault config: mount %q and prefix %q must be slash-separated segments of letters, digits, '.', '_' and '-'", c.Mount, c.Prefix)
	}
	methods := 0
	if c.Token != "" {
		methods++
	}
	if c.AppRole != nil {
		methods++
		a := *c.AppRole
		if a.Mount == "" {
			a.Mount = DefaultAppRoleMount
		}
		if a.RoleID == "" || a.SecretID == "" || !validMountPath(a.Mount) {
			return c, errors.New("vault config: AppRole needs RoleID, SecretID and a valid Mount")
		}
		c.AppRole = &a
	}
	if c.JWT != nil {
		methods++
		j := *c.JWT
		if j.Mount == "" {
			j.Mount = DefaultJWTMount
		}
		if j.Role == "" || (j.JWT == "") == (j.JWTFile == "") || !validMountPath(j.Mount) {
			return c, errors.New("vault config: JWT needs Role, exactly one of JWT and JWTFile, and a valid Mount")
		}
		c.JWT = &j
	}
	if methods != 1 {
		return c, fmt.Errorf("vault config: set exactly one of Token, AppRole and JWT (%d set)", methods)
	}
	if c.PreviousGrace <= 0 {
		c.PreviousGrace = DefaultPreviousGrace
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}

// Close stops the background token renewal and login, and waits for it. Calls made afterwards still reach
// Vault with the last token. Idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		<-s.done
		s.transport.CloseIdleConnections()
	})
	return nil
}

func (s *Store) now() time.Time { return s.cfg.Now() }

func (s *Store) dataPath(rel string) string { return s.cfg.Mount + "/data/" + s.cfg.Prefix + "/" + rel }
func (s *Store) metadataPath(rel string) string {
	return s.cfg.Mount + "/metadata/" + s.cfg.Prefix + "/" + rel
}

// need names the policy a request on rel needs, for permission errors.
func (s *Store) need(capabilities, rel string) string {
	return fmt.Sprintf("%s on %s and read on %s", capabilities, s.dataPath(rel), s.metadataPath(rel))
}

func issuerRel(segment string) string { return issuersDir + "/" + segment }

// IssuerKeys returns the issuer's current key and, while it is younger than PreviousGrace counted from the
// current key's creation, the previous one. Deleted and destroyed versions are skipped. An invalid issuer id
// is secrets.ErrUnknownIssuer (no such issuer can exist) without asking Vault.
func (s *Store) IssuerKeys(ctx context.Context, issuer string) ([]secrets.Key, error) {
	seg, err := issuerSegment(issuer)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", secrets.ErrUnknownIssuer, err)
	}
	if err := s.ready(ctx); err != nil {
		return nil, fmt.Errorf("issuer %q keys: %w", issuer, err)
	}
	rel := issuerRel(seg)
	vals, err := s.liveValues(ctx, rel, "secret", s.need("read", issuersDir+"/*"), 2)
	if err != nil {
		return nil, fmt.Errorf("issuer %q keys: %w", issuer, err)
	}
	if len(vals) == 0 {
		return nil, fmt.Errorf("issuer %q: %w", issuer, secrets.ErrUnknownIssuer)
	}
	keys := make([]secrets.Key, len(vals))
	for i, v := range vals {
		key, err := secrets.KeyFromStored(keyID(issuer, v.version), v.value, MinSecretSize)
		if err != nil {
			return nil, fmt.Errorf("issuer %q key version %d: %w: %w", issuer, v.version, ErrMalformed, err)
		}
		keys[i] = key
	}
	return keys, nil
}

func keyID(issuer string, version int) string { return fmt.Sprintf("%s-v%d", issuer, version) }

// CreateIssuer writes issuer's first key, a random text secret (field "secret"), and returns it. ErrIssuerExists when the
// issuer has a secret in Vault already (even one whose versions are all deleted: remove it with `vault kv
// metadata delete` to start over).
func (s *Store) CreateIssuer(issuer string) (secrets.Key, error) {
	seg, err := issuerSegment(issuer)
	if err != nil {
		return secrets.Key{}, fmt.Errorf("create issuer: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	defer cancel()
	if err := s.ready(ctx); err != nil {
		return secrets.Key{}, fmt.Errorf("create issuer %q: %w", issuer, err)
	}
	key, err := s.writeKey(ctx, issuer, issuerRel(seg), 0)
	if errors.Is(err, errCASMismatch) {
		return secrets.Key{}, fmt.Errorf("create issuer %q: %w", issuer, ErrIssuerExists)
	}
	if err != nil {
		return secrets.Key{}, fmt.Errorf("create issuer %q: %w", issuer, err)
	}
	return key, nil
}

// Rotate writes a new version of issuer's key and returns it: it becomes current, the former current key
// the previous one. The write is a check-and-set on the version read just before, so two rotations never
// overwrite each other: the loser reads again and retries once, then fails with ErrConflict.
// secrets.ErrUnknownIssuer when the issuer has no readable version.
func (s *Store) Rotate(issuer string) (secrets.Key, error) {
	seg, err := issuerSegment(issuer)
	if err != nil {
		return secrets.Key{}, fmt.Errorf("rotate issuer: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	defer cancel()
	if err := s.ready(ctx); err != nil {
		return secrets.Key{}, fmt.Errorf("rotate issuer %q: %w", issuer, err)
	}
	rel := issuerRel(seg)
	for attempt := 0; ; attempt++ {
		md, found, err := s.readMetadata(ctx, rel, s.need("create, update", issuersDir+"/*"))
		if err != nil {
			return secrets.Key{}, fmt.Errorf("rotate issuer %q: %w", issuer, err)
		}
		now := s.now()
		if !found || !slices.ContainsFunc(md.versions, func(v kvVersion) bool { return v.live(now) }) {
			return secrets.Key{}, fmt.Errorf("rotate issuer %q: %w", issuer, secrets.ErrUnknownIssuer)
		}
		key, err := s.writeKey(ctx, issuer, rel, md.current)
		switch {
		case errors.Is(err, errCASMismatch) && attempt == 0:
			continue
		case errors.Is(err, errCASMismatch):
			return secrets.Key{}, fmt.Errorf("rotate issuer %q: %w", issuer, ErrConflict)
		case err != nil:
			return secrets.Key{}, fmt.Errorf("rotate issuer %q: %w", issuer, err)
		}
		return key, nil
	}
}

// writeKey writes a new random text secret as the version after cas.
func (s *Store) writeKey(ctx context.Context, issuer, rel string, cas int) (secrets.Key, error) {
	key, err := secrets.NewTextKey("")
	if err != nil {
		return secrets.Key{}, err
	}
	v, err := s.put(ctx, rel, map[string]any{"secret": key.Given()}, cas, s.need("create, update", issuersDir+"/*"))
	if err != nil {
		return secrets.Key{}, err
	}
	key.ID = keyID(issuer, v)
	return key, nil
}

// ready fails, as secrets.ErrUnavailable, while the Store has no usable token: its first login has not
// succeeded yet, or its token expired before the background renewal replaced it (a renewal that stalled, a
// max TTL reached while Vault was away), in which case it first tries to log in at once.
func (s *Store) ready(ctx context.Context) error {
	err, expired := s.tokenState()
	if err == nil || !expired || s.login == nil {
		return err
	}
	s.loginMu.Lock()
	defer s.loginMu.Unlock()
	if err, _ := s.tokenState(); err == nil {
		return nil // another call logged in meanwhile
	}
	if _, err := s.authenticate(ctx); err != nil {
		return fmt.Errorf("%w: the vault token expired and logging in again failed: %w", secrets.ErrUnavailable, err)
	}
	return nil
}

// tokenState says why the Store has no usable token, if it has none; expired is true when it had one.
func (s *Store) tokenState() (err error, expired bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.authErr != nil {
		return fmt.Errorf("no vault token yet: %w", s.authErr), false
	}
	if !s.expiry.IsZero() && !s.wall().Before(s.expiry) {
		if s.loginErr != nil {
			return fmt.Errorf("%w: the vault token expired and logging in again failed: %w", secrets.ErrUnavailable, s.loginErr), true
		}
		return fmt.Errorf("%w: the vault token expired and has not been replaced yet", secrets.ErrUnavailable), true
	}
	return nil, false
}

func (s *Store) method() string {
	switch {
	case s.cfg.AppRole != nil:
		return "approle"
	case s.cfg.JWT != nil:
		return "jwt"
	default:
		return "token"
	}
}

// readJWT returns the JWT to log in with, reading JWTFile afresh.
func (s *Store) readJWT() (string, error) {
	if s.cfg.JWT.JWTFile == "" {
		return s.cfg.JWT.JWT, nil
	}
	b, err := os.ReadFile(s.cfg.JWT.JWTFile)
	if err != nil {
		return "", fmt.Errorf("%w: read JWT: %w", ErrLogin, err)
	}
	jwt := strings.TrimSpace(string(b))
	if jwt == "" {
		return "", fmt.Errorf("%w: JWT file %s is empty", ErrLogin, s.cfg.JWT.JWTFile)
	}
	return jwt, nil
}
