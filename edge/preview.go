package edge

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/previews"
	"github.com/warren-mesh/warren/internal/strictjson"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/wire"
)

// Preview URLs (docs/ARCHITECTURE.md#previews): POST/GET /v1/sandbox/previews and DELETE
// /v1/sandbox/previews/{id} make, list and revoke them (served here, over the shared store, never relayed);
// a request to a preview URL, at <token>.<Domain> or <PathBase>/preview/<token>/..., is verified against the
// store and relayed, HTTP or WebSocket, to the port of the owner's sandbox through the owner's runner (over
// the mesh when another region holds the user), with the edge's and the user's credentials removed. No
// preview shares an origin with an endpoint of the edge: a preview host answers nothing but its preview, and
// path previews are served by PreviewHandler alone, on a listener of their own.

// PreviewConfig enables preview URLs.
type PreviewConfig struct {
	// Store holds previews and their signing key in the database every edge shares (required).
	Store previews.Store
	// Domain, when set, is a wildcard domain that reaches the edges: previews are https://<token>.<Domain>/
	// (each on an origin of its own). Unset: previews are paths of the edge's own host, /preview/<token>/.
	Domain string
	// PathMode allows previews as paths (/preview/<token>/) when Domain is unset: for development only,
	// since every such preview shares one origin, so one preview's page could read another's (a private one
	// included, with its owner's access cookie) and set cookies for them all. They are served by
	// PreviewHandler alone, never by Handler: on the edge's origin a preview's page could call what trusts
	// that origin (warren dev's playground token endpoint). With Domain too, both forms are served (the API
	// answers the host form). Without PathMode no /preview/ path is served, and without Domain either
	// creating a preview is refused (unavailable).
	PathMode bool
	// PathBase is where PreviewHandler is served, scheme://host:port without a path (required with
	// PathMode): path previews are <PathBase>/preview/<token>/, an origin that is not the edge's.
	PathBase string
	// MaxPerUser bounds a user's live previews (0: DefaultMaxPreviews).
	MaxPerUser int
	// Scheme is the scheme clients reach preview URLs with: "https" when TLS ends in front of the edges (a
	// load balancer holding the wildcard certificate), which the edge cannot see. It makes the URLs the API
	// answers, the access cookie's Secure attribute and the X-Forwarded-Proto the tenant's server sees.
	// Empty: the request's own (https over TLS, else http).
	Scheme string
	// DefaultTTL is a preview's lifetime when the request names none (0: one hour); MaxTTL the longest a
	// request may ask (0: seven days).
	DefaultTTL, MaxTTL time.Duration
}

// DefaultMaxPreviews is a user's limit of live previews when PreviewConfig.MaxPerUser is 0.
const DefaultMaxPreviews = 20

// previewBodyLimit bounds a create request's body.
const previewBodyLimit = 4 << 10

type previewState struct {
	cfg  PreviewConfig
	mu   sync.Mutex
	key  []byte // read once from the store
	reqs *prometheus.CounterVec
}

func (e *Edge) previewRoutes(mux *http.ServeMux) {
	pc := e.cfg.Previews
	if pc == nil || pc.Store == nil {
		return
	}
	cfg := *pc
	if cfg.MaxPerUser <= 0 {
		cfg.MaxPerUser = DefaultMaxPreviews
	}
	if cfg.DefaultTTL <= 0 {
		cfg.DefaultTTL = time.Hour
	}
	if cfg.MaxTTL <= 0 {
		cfg.MaxTTL = 7 * 24 * time.Hour
	}
	cfg.Domain = strings.ToLower(strings.TrimSuffix(cfg.Domain, "."))
	st := &previewState{cfg: cfg, reqs: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "warren_edge_preview_requests_total",
		Help: "Requests to preview URLs, by result (ok, not_found, expired, unauthenticated, forbidden, unavailable).",
	}, []string{"result"})}
	if e.cfg.Metrics != nil {
		if err := e.cfg.Metrics.Register(st.reqs); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				st.reqs = are.ExistingCollector.(*prometheus.CounterVec)
			}
		}
	}
	e.pv = st
	mux.HandleFunc("/v1/sandbox/previews", e.servePreviewAPI)
	mux.HandleFunc("/v1/sandbox/previews/{id}", e.servePreviewAPI)
	if cfg.PathMode {
		mux.HandleFunc("/preview/", func(w http.ResponseWriter, r *http.Request) {
			wire.WriteHTTPError(w, nil, wire.Errorf(wire.NotFound, "preview URLs are not served on the edge's origin: path previews are at %s/preview/<token>/", cfg.PathBase))
		})
	}
}

// PreviewHandler serves preview URLs and nothing else: /preview/<token>/... with PreviewConfig.PathMode,
// <token>.<Domain> with a Domain, not_found for anything else (no endpoint of the edge, no playground). Serve
// it on a listener of its own, at PreviewConfig.PathBase, so that a preview's page is never on the origin of
// an endpoint that trusts its own origin or its caller's address.
func (e *Edge) PreviewHandler() http.Handler {
	mux := http.NewServeMux()
	if e.pv != nil && e.pv.cfg.PathMode {
		mux.HandleFunc("/preview/", e.servePreviewPath)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		wire.WriteHTTPError(w, nil, wire.Errorf(wire.NotFound, "this origin serves preview URLs only (/preview/<token>/)"))
	})
	return e.PreviewHosts(httpx.RequestIDs(mux))
}

// PreviewHosts serves requests to <token>.<Domain> as previews, the rest with next. Handler has it already;
// a server that mounts more beside Handler (/metrics, warren dev's playground and billing API) puts its
// whole mux behind it, so that a preview host answers its preview and nothing else.
func (e *Edge) PreviewHosts(next http.Handler) http.Handler {
	if e.pv == nil || e.pv.cfg.Domain == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tok, ok := previews.ParseHost(r.Host, e.pv.cfg.Domain); ok {
			httpx.RequestIDs(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				e.servePreview(w, r, tok, "", r.URL.EscapedPath())
			})).ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// check refuses a configuration the edge cannot serve; nil (no previews) is fine.
func (c *PreviewConfig) check() error {
	if c != nil && c.Scheme != "" && c.Scheme != "http" && c.Scheme != "https" {
		return errors.New("edge: preview scheme " + strconv.Quote(c.Scheme) + ": want http or https")
	}
	if c != nil && c.PathMode && !pathBaseRE.MatchString(c.PathBase) {
		return errors.New("edge: path previews need an origin of their own: preview path base " + strconv.Quote(c.PathBase) +
			": want scheme://host:port (http or https, no path) where PreviewHandler is served")
	}
	if c != nil && c.Domain != "" && (len(c.Domain) > maxPreviewDomain || !previewDomainRE.MatchString(c.Domain)) {
		return errors.New("edge: preview domain " + strconv.Quote(c.Domain) + ": want a lower-case DNS name of at least two labels " +
			"(e.g. preview.example.com), without scheme, port, path or wildcard, at most " + strconv.Itoa(maxPreviewDomain) + " characters")
	}
	return nil
}

// previewDomainRE is what PreviewConfig.Domain may be, as terraform/modules/settings checks preview_domain: a
// lower-case DNS name of two labels or more. maxPreviewDomain leaves room for the preview's label
// (<port>-<id>-<sig>., 55 characters) within DNS's 253.
var previewDomainRE = regexp.MustCompile(`^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

const maxPreviewDomain = 197

// pathBaseRE is what PreviewConfig.PathBase may be: an http(s) origin, host (a name, IPv4 or [IPv6]) and
// optional port, nothing after.
var pathBaseRE = regexp.MustCompile(`^https?://([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?$`)

// scheme is the scheme clients reach r's edge with: PreviewConfig.Scheme, else r's own.
func (st *previewState) scheme(r *http.Request) string {
	switch {
	case st.cfg.Scheme != "":
		return st.cfg.Scheme
	case r.TLS != nil:
		return "https"
	}
	return "http"
}

func (st *previewState) signingKey(ctx context.Context) ([]byte, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.key == nil {
		k, err := st.cfg.Store.Key(ctx)
		if err != nil {
			return nil, wire.Wrap(wire.Unavailable, err, "previews are unavailable")
		}
		st.key = k
	}
	return st.key, nil
}

func (e *Edge) viewOf(r *http.Request, key []byte, p previews.Preview) wire.Preview {
	tok := previews.Token(key, p)
	scheme := e.pv.scheme(r)
	var u string
	if d := e.pv.cfg.Domain; d != "" {
		host := tok + "." + d
		if _, port, err := splitPort(r.Host); err == nil && port != "" {
			host += ":" + port
		}
		u = scheme + "://" + host + "/"
	} else {
		u = e.pv.cfg.PathBase + "/preview/" + tok + "/"
	}
	return wire.Preview{ID: p.ID, Port: p.Port, Public: p.Public, Created: p.Created, Expires: p.Expires, Token: tok, URL: u}
}

func splitPort(hostport string) (string, string, error) {
	i := strings.LastIndexByte(hostport, ':')
	if i < 0 || strings.Contains(hostport[i:], "]") {
		return hostport, "", nil
	}
	return hostport[:i], hostport[i+1:], nil
}

// servePreviewAPI makes (POST), lists (GET) and revokes (DELETE .../{id}) the caller's previews.
func (e *Edge) servePreviewAPI(w http.ResponseWriter, r *http.Request) {
	log := e.log.With("request_id", httpx.RequestID(r.Context()))
	id := r.PathValue("id")
	var err error
	switch {
	case id == "" && r.Method == http.MethodPost:
		err = e.createPreview(w, r)
	case id == "" && r.Method == http.MethodGet:
		err = e.listPreviews(w, r)
	case id != "" && r.Method == http.MethodDelete:
		err = e.revokePreview(w, r, id)
	default:
		httpx.MethodNotAllowed(w, r, map[bool][]string{true: {http.MethodGet, http.MethodPost}, false: {http.MethodDelete}}[id == ""])
		return
	}
	if err != nil {
		wire.WriteHTTPError(w, log, err)
	}
}

func (e *Edge) createPreview(w http.ResponseWriter, r *http.Request) error {
	var req wire.PreviewRequest
	if err := strictjson.Read(io.LimitReader(r.Body, previewBodyLimit), &req, strictjson.RejectUnknown); err != nil {
		return wire.Wrap(wire.InvalidArgument, err, "the body must be {\"port\": 1-65535, \"public\": bool, \"ttl_seconds\": n}: "+err.Error())
	}
	if req.Port < 1 || req.Port > 65535 {
		return wire.Errorf(wire.InvalidArgument, "port must be 1 to 65535")
	}
	cfg := e.pv.cfg
	if cfg.Domain == "" && !cfg.PathMode {
		return wire.Errorf(wire.Unavailable, "preview URLs need a wildcard domain on this edge (warren edge -preview-domain): "+
			"previews as paths would share the edge's origin")
	}
	ttl := cfg.DefaultTTL
	if req.TTLSeconds != 0 {
		if req.TTLSeconds < 0 || req.TTLSeconds > int64(cfg.MaxTTL/time.Second) {
			return wire.Errorf(wire.InvalidArgument, "ttl_seconds must be 1 to %d", int64(cfg.MaxTTL/time.Second)).
				WithDetails(map[string]any{"max_ttl_seconds": int64(cfg.MaxTTL / time.Second)})
		}
		ttl = time.Duration(req.TTLSeconds) * time.Second
	}
	// Admitted as any sandbox request (token, budget, the user's runner found or started): the grant it
	// makes is the account the preview's traffic runs the sandbox under.
	a, err := e.admit(r.Context(), r, false)
	if err != nil {
		return err
	}
	key, err := e.pv.signingKey(r.Context())
	if err != nil {
		return err
	}
	now := e.cfg.Now().UTC().Truncate(time.Microsecond) // what every store keeps
	g := a.grant(a.budget)
	p := previews.Preview{ID: previews.NewID(), Issuer: a.claims.Issuer, User: a.claims.Subject, Port: req.Port,
		Public: req.Public, Created: now, Expires: now.Add(ttl), Grant: g.Encode()}
	limit := previewLimit(g.Limits, cfg.MaxPerUser) // the user's quota, else -preview-max-per-user
	switch err := cfg.Store.Create(r.Context(), p, limit); {
	case errors.Is(err, previews.ErrLimit):
		return wire.Wrap(wire.ResourceExhausted, err, "too many live preview URLs (the quota's max_preview_urls, else the edge's -preview-max-per-user); revoke one first").
			WithDetails(map[string]any{"max_previews": limit, "quota": "max_preview_urls"})
	case err != nil:
		return wire.Wrap(wire.Unavailable, err, "previews are unavailable")
	}
	a.log.Info("preview created", "preview", p.ID, "port", p.Port, "public", p.Public, "expires", p.Expires)
	writePreviewJSON(w, http.StatusCreated, e.viewOf(r, key, p))
	return nil
}

// caller verifies the token of a request that needs no sandbox (listing and revoking previews).
func (e *Edge) caller(r *http.Request) (*token.Claims, error) {
	raw, err := bearer(r)
	if err != nil {
		return nil, err
	}
	return e.cfg.Verifier.Verify(r.Context(), raw)
}

func (e *Edge) listPreviews(w http.ResponseWriter, r *http.Request) error {
	claims, err := e.caller(r)
	if err != nil {
		return err
	}
	key, err := e.pv.signingKey(r.Context())
	if err != nil {
		return err
	}
	list, err := e.pv.cfg.Store.List(r.Context(), claims.Issuer, claims.Subject, e.cfg.Now())
	if err != nil {
		return wire.Wrap(wire.Unavailable, err, "previews are unavailable")
	}
	out := wire.PreviewList{Previews: make([]wire.Preview, len(list))}
	for i, p := range list {
		out.Previews[i] = e.viewOf(r, key, p)
	}
	writePreviewJSON(w, http.StatusOK, out)
	return nil
}

func (e *Edge) revokePreview(w http.ResponseWriter, r *http.Request, id string) error {
	claims, err := e.caller(r)
	if err != nil {
		return err
	}
	switch err := e.pv.cfg.Store.Revoke(r.Context(), claims.Issuer, claims.Subject, id); {
	case errors.Is(err, previews.ErrNotFound):
		return wire.Errorf(wire.NotFound, "you have no preview %q", id)
	case err != nil:
		return wire.Wrap(wire.Unavailable, err, "previews are unavailable")
	}
	e.log.Info("preview revoked", "request_id", httpx.RequestID(r.Context()), "issuer", claims.Issuer, "user", claims.Subject, "preview", id)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func writePreviewJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// servePreviewPath serves /preview/<token>/<path>: /preview/<token> alone is redirected to its slash, so
// the page's relative links resolve under the prefix.
func (e *Edge) servePreviewPath(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.EscapedPath(), "/preview/")
	tok, path, slash := strings.Cut(rest, "/")
	if !slash {
		if _, ok := previews.ParseToken(tok); ok {
			u := *r.URL
			u.Path, u.RawPath = "/preview/"+tok+"/", ""
			http.Redirect(w, r, u.RequestURI(), http.StatusPermanentRedirect)
			return
		}
	}
	e.servePreview(w, r, tok, "/preview/"+tok, "/"+path)
}

// servePreview verifies the preview of token tok and relays r to its port, at path (escaped) under the
// preview's root; prefix is what the client's URL has before it ("" for a preview host).
func (e *Edge) servePreview(w http.ResponseWriter, r *http.Request, tok, prefix, path string) {
	ctx := r.Context()
	log := e.log.With("request_id", httpx.RequestID(ctx))
	result := "ok"
	defer func() { e.pv.reqs.WithLabelValues(result).Inc() }()
	fail := func(res string, err error) {
		result = res
		wire.WriteHTTPError(w, log, err)
	}
	t, ok := previews.ParseToken(strings.ToLower(tok))
	if !ok {
		fail("not_found", wire.Errorf(wire.NotFound, "no such preview"))
		return
	}
	key, err := e.pv.signingKey(ctx)
	if err != nil {
		fail("unavailable", err)
		return
	}
	p, err := e.pv.cfg.Store.Get(ctx, t.ID)
	if errors.Is(err, previews.ErrNotFound) || err == nil && !previews.Verify(key, p, t) {
		// Never made, revoked, or a signature that is not ours: one answer for all.
		fail("not_found", wire.Errorf(wire.NotFound, "no such preview"))
		return
	}
	if err != nil {
		fail("unavailable", wire.Wrap(wire.Unavailable, err, "previews are unavailable"))
		return
	}
	log = log.With("issuer", p.Issuer, "user", p.User, "preview", p.ID)
	if !e.cfg.Now().Before(p.Expires) {
		fail("expired", wire.Errorf(wire.NotFound, "this preview has expired"))
		return
	}
	if !p.Public {
		done, res, err := e.previewAccess(w, r, key, p, prefix)
		if err != nil {
			fail(res, err)
			return
		}
		if done {
			result = "redirect"
			return
		}
	}
	g, err := wire.DecodeGrant(p.Grant)
	if err != nil {
		fail("unavailable", wire.Wrap(wire.Internal, err, "the preview's grant"))
		return
	}
	out := previewRequest(r, p, prefix, path, e.pv.scheme(r))
	a := forwardedAdmission(g, log)
	entry, err := e.cfg.Sandboxes.Ensure(ctx, a.sandboxRequest())
	if err != nil {
		if owner := ownerRegion(err); owner != "" && owner != e.cfg.Region && e.cfg.Mesh != nil {
			a.owner, a.log = owner, a.log.With("owner", owner)
			_ = http.NewResponseController(w).EnableFullDuplex()
			body := guardBody(out, w, nil) // as serveSandbox: the body is not read once this returns
			defer body.finish()
			e.proxyForward(w, out, a, body)
			return
		}
		fail("unavailable", err)
		return
	}
	a.entry, a.log = entry, a.log.With("epoch", entry.Epoch)
	_ = http.NewResponseController(w).EnableFullDuplex()
	body := guardBody(out, w, nil)
	defer body.finish()
	e.proxyToRunner(w, out, a, body)
}

// previewAccess lets the owner of private preview p in: a valid access cookie, or the owner's token in
// Authorization or ?token=. A token in the query of a plain GET sets the cookie and redirects to the URL
// without it (done), so the token leaves the address bar and the page's own links work.
func (e *Edge) previewAccess(w http.ResponseWriter, r *http.Request, key []byte, p previews.Preview, prefix string) (done bool, result string, err error) {
	now := e.cfg.Now()
	// Every access cookie the request carries: a page under the preview domain (another tenant's preview,
	// if the domain is not a public suffix) may have set one for the whole domain, sent before the owner's.
	for _, c := range r.CookiesNamed(previews.Cookie) {
		if previews.CheckCookie(key, p, c.Value, now) {
			return false, "", nil
		}
	}
	raw, err := bearer(r)
	if err != nil {
		return false, "unauthenticated", wire.Errorf(wire.Unauthenticated, "this preview is private: open it once with its owner's token (?token=) or send Authorization: Bearer")
	}
	claims, err := e.cfg.Verifier.Verify(r.Context(), raw)
	if err != nil {
		return false, "unauthenticated", err
	}
	if claims.Issuer != p.Issuer || claims.Subject != p.User {
		return false, "forbidden", wire.Errorf(wire.PermissionDenied, "this preview is private to its owner")
	}
	if r.Header.Get("Authorization") != "" || r.Method != http.MethodGet || r.Header.Get("Upgrade") != "" {
		return false, "", nil
	}
	exp := p.Expires
	if claims.ExpiresAt.Before(exp) {
		exp = claims.ExpiresAt
	}
	http.SetCookie(w, &http.Cookie{Name: previews.Cookie, Value: previews.CookieValue(key, p, exp), Path: prefix + "/",
		Expires: exp, HttpOnly: true, Secure: e.pv.scheme(r) == "https", SameSite: http.SameSiteLaxMode})
	u := withoutToken(r.URL)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
	return true, "", nil
}

// previewRequest is r as the runner's preview relay takes it: /v1/preview/<port><path>, the client's
// headers without any credential of Warren's (its Authorization, the access cookie, X-Warren-*) or
// forwarding header (previews.ForwardingHeader), the client's other cookies and the public host, scheme
// (proto) and prefix in the previews.*Header headers.
func previewRequest(r *http.Request, p previews.Preview, prefix, path, proto string) *http.Request {
	out := r.Clone(r.Context())
	esc := "/v1/preview/" + strconv.Itoa(p.Port) + path
	u, err := url.PathUnescape(esc)
	if err != nil {
		u = esc
	}
	out.URL.Path, out.URL.RawPath = u, esc
	for k := range out.Header {
		// Warren's own, and what the visitor claims a proxy said about it (X-Real-IP, Forwarded…): the
		// forwarding headers the preview's server sees are the edge's alone.
		if strings.HasPrefix(strings.ToLower(k), "x-warren-") || previews.ForwardingHeader(k) {
			out.Header.Del(k)
		}
	}
	out.Header.Del("Authorization")
	if ref := out.Header.Get("Referer"); ref != "" {
		// The page the client came from may be a preview URL that carried the owner's token.
		if u, err := url.Parse(ref); err == nil {
			out.Header.Set("Referer", withoutToken(u).String())
		} else {
			out.Header.Del("Referer")
		}
	}
	var kept []string
	for _, c := range r.Cookies() {
		if c.Name != previews.Cookie {
			kept = append(kept, c.Name+"="+c.Value)
		}
	}
	out.Header.Del("Cookie")
	if len(kept) > 0 {
		out.Header.Set(previews.CookieHeader, strings.Join(kept, "; "))
	}
	out.Header.Set(previews.HostHeader, r.Host)
	out.Header.Set(previews.ProtoHeader, proto)
	if prefix != "" {
		out.Header.Set(previews.PrefixHeader, prefix)
	}
	return out
}

// previewPath reports whether path is a runner's preview relay path (/v1/preview/<port>/...), which a peer
// edge may forward over the mesh besides the relayed sandbox API (relayedPath).
func previewPath(path string) bool { return strings.HasPrefix(path, "/v1/preview/") }
