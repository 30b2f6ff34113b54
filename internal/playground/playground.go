// Package playground is the page `warren dev` serves at /playground/: a dev token minted by a same-origin,
// loopback-only endpoint (no preview shares its origin), a chat with the agent streamed live (tool calls as they happen, each turn's
// cost), a file browser of the sandbox and an exec box, all through the TypeScript SDK's browser build
// (sdk/js) over WebTransport with the WebSocket as fallback. Plain HTML and JavaScript, embedded in the
// binary. It exists only in the dev stack: production edges serve edge.Handler alone, which has no
// /playground/ route and no token endpoint.
package playground

import (
	"context"
	"embed"
	"encoding/json"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"strings"
	"time"

	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/strictjson"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/wire"
)

//go:embed assets
var assets embed.FS

// sdkFiles is sdk/js/dist/src/*.js as `make playground-sdk` copies it; only MISSING.txt on a fresh clone.
//
//go:embed sdk
var sdkFiles embed.FS

// Prefix is where the playground is mounted.
const Prefix = "/playground/"

// Bounds and grants of a playground token.
const (
	maxTokenRequest = 4 << 10
	tokenTTL        = time.Hour
	tokenAIMicros   = 5_000_000 // $5 a day
	tokenCompute    = 3600      // seconds a day
)

// Config configures the playground.
type Config struct {
	// Issuer is the issuer whose tokens the page mints (the dev issuer).
	Issuer string
	// Key returns the issuer's current signing key.
	Key    func(ctx context.Context) (secrets.Key, error)
	Logger *slog.Logger
	Now    func() time.Time // nil: time.Now
	// SDK, when set, holds the SDK's modules in place of the embedded ones (tests of a missing build).
	SDK fs.FS
}

// SDKBuilt reports whether the SDK's browser build is embedded (false on a fresh clone before make sdk-js).
func SDKBuilt() bool {
	_, err := fs.Stat(sdkFiles, "sdk/index.js")
	return err == nil
}

// Handler serves the playground under Prefix.
func Handler(cfg Config) http.Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	mux := &httpx.Mux{What: "playground"} // a wrong method is a wire error, as on every API
	static, _ := fs.Sub(assets, "assets")
	sdk, _ := fs.Sub(sdkFiles, "sdk")
	if cfg.SDK != nil {
		sdk = cfg.SDK
	}
	mux.Handle("GET "+Prefix+"sdk/", pageHeaders(http.StripPrefix(Prefix+"sdk/", onlyJS(http.FileServerFS(sdk)))))
	mux.HandleFunc("POST "+Prefix+"token", cfg.serveToken)
	mux.Handle("GET "+Prefix, pageHeaders(http.StripPrefix(Prefix, http.FileServerFS(static))))
	return mux
}

// onlyJS serves the SDK's modules and nothing else of the directory (no listing, no placeholder): a missing
// build is a 404 the page reports.
func onlyJS(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, ".js") || strings.Contains(r.URL.Path, "/") {
			wire.WriteHTTPError(w, nil, wire.Errorf(wire.NotFound, "no such SDK module"))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// pageHeaders keeps the page out of caches and out of other pages' frames: a page of another origin (a
// tenant's preview) framing the playground could not read it, but could dress it up to be clicked.
func pageHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", "frame-ancestors 'none'")
		w.Header().Set("X-Frame-Options", "DENY")
		h.ServeHTTP(w, r)
	})
}

// tokenRequest is POST /playground/token's body.
type tokenRequest struct {
	User string `json:"user"`
}

// tokenResponse is its answer.
type tokenResponse struct {
	Token     string    `json:"token"`
	Issuer    string    `json:"issuer"`
	User      string    `json:"user"`
	ExpiresAt time.Time `json:"expiresAt"`
}

var userRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// parseTokenRequest reads and checks a token request body (at most maxTokenRequest bytes).
func parseTokenRequest(body []byte) (tokenRequest, error) {
	var req tokenRequest
	if len(body) > maxTokenRequest {
		return req, wire.Errorf(wire.PayloadTooLarge, "token request over %d bytes", maxTokenRequest)
	}
	if err := strictjson.Unmarshal(body, &req, strictjson.RejectUnknown); err != nil {
		return req, wire.Wrap(wire.InvalidArgument, err, "token request: want {\"user\": \"...\"}")
	}
	if !userRe.MatchString(req.User) {
		return req, wire.Errorf(wire.InvalidArgument, "user: 1 to 64 of [A-Za-z0-9._-], starting with a letter or digit")
	}
	return req, nil
}

// sameOriginLoopback refuses what is not the playground page itself on this machine: a client that is not
// on loopback (a dev stack listening on all interfaces must not hand tokens to the network), a Host that
// is not a loopback address or localhost (DNS rebinding: evil.example resolving to 127.0.0.1 is another
// origin in the browser's eyes but reaches this port), and a cross-origin request (a page of another site
// may POST here; the browser sends its Origin). It trusts every page of its origin, so nothing a tenant
// controls may be served there: warren dev serves preview URLs on an origin of their own
// (edge.PreviewHandler; internal/devstack TestPreviewPagesCannotMintPlaygroundTokens). A secret in the
// page would not do instead: a page of the same origin could fetch the playground's HTML and read it.
func sameOriginLoopback(r *http.Request) error {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err != nil || !ap.Addr().Unmap().IsLoopback() {
		return wire.Errorf(wire.PermissionDenied, "the playground mints tokens for loopback clients only")
	}
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); (err != nil || !ip.Unmap().IsLoopback()) && !strings.EqualFold(host, "localhost") {
		return wire.Errorf(wire.PermissionDenied, "the playground mints tokens when reached at a loopback address or localhost")
	}
	if r.Header.Get("Origin") != "http://"+r.Host {
		return wire.Errorf(wire.PermissionDenied, "the playground mints tokens for its own page only (same origin)")
	}
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" {
		return wire.Errorf(wire.PermissionDenied, "the playground mints tokens for its own page only (same origin)")
	}
	return nil
}

// serveToken mints a dev token for the user the page names: POST /playground/token {"user": "alice"}.
func (cfg Config) serveToken(w http.ResponseWriter, r *http.Request) {
	log := cfg.Logger.With("component", "playground")
	if err := sameOriginLoopback(r); err != nil {
		log.Info("playground token refused", "remote", r.RemoteAddr, "err", err)
		wire.WriteHTTPError(w, log, err)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxTokenRequest+1))
	if err != nil {
		wire.WriteHTTPError(w, log, wire.Wrap(wire.InvalidArgument, err, "read token request"))
		return
	}
	req, err := parseTokenRequest(body)
	if err != nil {
		wire.WriteHTTPError(w, log, err)
		return
	}
	key, err := cfg.Key(r.Context())
	if err != nil {
		wire.WriteHTTPError(w, log, wire.Wrap(wire.Unavailable, err, "issuer key"))
		return
	}
	now := cfg.Now().UTC().Truncate(time.Second)
	claims := token.Claims{
		Issuer: cfg.Issuer, Subject: req.User, IssuedAt: now, ExpiresAt: now.Add(tokenTTL), HasBudget: true,
		Budget: token.Budget{AIMicros: tokenAIMicros, ComputeSeconds: tokenCompute, Window: token.WindowDay, WindowStart: token.WindowDay.Start(now)},
	}
	tok, err := token.Mint(key, claims)
	if err != nil {
		wire.WriteHTTPError(w, log, wire.Wrap(wire.Internal, err, "mint token"))
		return
	}
	log.Info("playground token minted", "issuer", cfg.Issuer, "user", req.User)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(tokenResponse{Token: tok, Issuer: cfg.Issuer, User: req.User, ExpiresAt: claims.ExpiresAt})
}
