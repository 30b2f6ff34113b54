package billing

import (
	"context"
	_ "embed" // the OpenAPI document
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/secrets"
	"github.com/warren-mesh/warren/internal/strictjson"
	"github.com/warren-mesh/warren/internal/wire"
)

// openAPI is GET /v1/openapi.json: the billing API (docs/PROTOCOL.md#billing-api) as OpenAPI 3.1. A test
// keeps its paths and methods equal to the routes below.
//
//go:embed openapi.json
var openAPI []byte

// DefaultMaxBodyBytes bounds request bodies of the billing API; larger ones are payload_too_large.
const DefaultMaxBodyBytes = 64 << 10

// KeyRotator writes new versions of issuers' HMAC keys to the secret store; *file.Store satisfies it. Safe
// for concurrent use. The returned secrets are handed to the caller once and never logged.
type KeyRotator interface {
	// Rotate adds a key version to an issuer that has keys and returns it; secrets.ErrUnknownIssuer when
	// the issuer has none.
	Rotate(issuer string) (secrets.Key, error)
	// CreateIssuer writes an issuer's first key and returns it; an error when it has keys already.
	CreateIssuer(issuer string) (secrets.Key, error)
}

// APIConfig configures the billing API.
type APIConfig struct {
	Store AdminStore // issuers, quotas, prices and usage; required
	Keys  KeyRotator // the secret store issuer keys are written to; required
	// AdminKeys returns the admin keys accepted as bearer tokens (*file.Store's AdminKeys); required. It is
	// asked on every request, so keys added or removed take effect at once. An error answers unavailable.
	AdminKeys    func(ctx context.Context) ([]string, error)
	Logger       *slog.Logger
	Metrics      prometheus.Registerer // optional
	MaxBodyBytes int64                 // default DefaultMaxBodyBytes
	// WebhookMaster is the operator's webhook secret the runners sign task webhooks with (their
	// -webhook-secret-file); GET /v1/issuers/{iss}/webhook-secret answers an issuer's secret derived from it.
	// Empty: that route answers unavailable.
	WebhookMaster []byte
	// Now stamps the creation of API keys (default time.Now).
	Now func() time.Time
}

// API is the billing role's admin HTTP API (docs/PROTOCOL.md#billing-api). Safe for concurrent use.
type API struct {
	cfg     APIConfig
	log     *slog.Logger
	mux     *http.ServeMux
	handler http.Handler
	m       *apiMetrics
}

// route is one method and path of the API; the mux, Mount and the OpenAPI test all read this table.
// scoped routes also accept an issuer's API key, for its own issuer: the {iss} of the path, or the iss
// filter of the usage report; the others need the admin key.
type route struct {
	method, pattern string
	serve           func(a *API, w http.ResponseWriter, r *http.Request) error
	scoped          bool
}

var routes = []route{
	{http.MethodGet, "/v1/issuers", (*API).listIssuers, false},
	{http.MethodGet, "/v1/issuers/{iss}", (*API).getIssuer, true},
	{http.MethodPut, "/v1/issuers/{iss}", (*API).putIssuer, false},
	{http.MethodPost, "/v1/issuers/{iss}/keys", (*API).rotateKey, false},
	{http.MethodPost, "/v1/issuers/{iss}/disable", (*API).disableIssuer, false},
	{http.MethodPost, "/v1/issuers/{iss}/enable", (*API).enableIssuer, false},
	{http.MethodGet, "/v1/issuers/{iss}/webhook-secret", (*API).webhookSecret, true},
	{http.MethodGet, "/v1/issuers/{iss}/api-keys", (*API).listAPIKeys, false},
	{http.MethodPost, "/v1/issuers/{iss}/api-keys", (*API).createAPIKey, false},
	{http.MethodDelete, "/v1/issuers/{iss}/api-keys/{id}", (*API).revokeAPIKey, false},
	{http.MethodGet, "/v1/quotas/{iss}", (*API).getQuota, true},
	{http.MethodPut, "/v1/quotas/{iss}", (*API).putQuota, true},
	{http.MethodGet, "/v1/quotas/{iss}/users/{sub}", (*API).getQuota, true},
	{http.MethodPut, "/v1/quotas/{iss}/users/{sub}", (*API).putQuota, true},
	{http.MethodDelete, "/v1/quotas/{iss}", (*API).deleteQuota, true},
	{http.MethodDelete, "/v1/quotas/{iss}/users/{sub}", (*API).deleteQuota, true},
	{http.MethodGet, "/v1/usage", (*API).usage, true},
	{http.MethodGet, "/v1/prices", (*API).listPrices, false},
	{http.MethodGet, "/v1/prices/{model}", (*API).getPrice, false},
	{http.MethodPut, "/v1/prices/{model}", (*API).putPrice, false},
	{http.MethodDelete, "/v1/prices/{model}", (*API).deletePrice, false},
	{http.MethodGet, "/v1/openapi.json", (*API).openAPI, true},
}

// NewAPI validates cfg and returns the API.
func NewAPI(cfg APIConfig) (*API, error) {
	if cfg.Store == nil || cfg.Keys == nil || cfg.AdminKeys == nil {
		return nil, errors.New("billing api: store, keys and admin keys are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	m, err := newAPIMetrics(cfg.Metrics)
	if err != nil {
		return nil, err
	}
	a := &API{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux(), m: m}
	// Patterns carry no method: the dispatcher answers a wrong method itself, so that error too has the
	// wire error shape (docs/PROTOCOL.md#errors).
	byPattern := map[string]map[string]route{}
	var order []string
	for _, rt := range routes {
		if byPattern[rt.pattern] == nil {
			byPattern[rt.pattern] = map[string]route{}
			order = append(order, rt.pattern)
		}
		byPattern[rt.pattern][rt.method] = rt
	}
	for _, p := range order {
		a.mux.Handle(p, a.dispatch(byPattern[p]))
	}
	a.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if _, err := a.authenticate(r); err != nil {
			a.fail(w, r, err)
			return
		}
		a.fail(w, r, httpx.NotFound("billing API", r).WithDetails(map[string]any{"routes": "GET /v1/openapi.json"}))
	})
	a.handler = httpx.RequestIDs(a.withRequest(a.mux))
	return a, nil
}

// ServeHTTP serves the API.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.handler.ServeHTTP(w, r) }

// Mount registers the API's path prefixes (/v1/issuers, /v1/quotas/, /v1/usage, /v1/prices,
// /v1/openapi.json and their subtrees) on mux, so the API can share a server with other handlers.
func (a *API) Mount(mux *http.ServeMux) {
	for _, p := range Prefixes() {
		mux.Handle(p, a)
	}
}

// Prefixes are the patterns Mount registers.
func Prefixes() []string {
	seen := map[string]bool{}
	var out []string
	for _, rt := range routes {
		segs := strings.SplitN(strings.TrimPrefix(rt.pattern, "/"), "/", 3) // "v1", "issuers", rest
		p := "/" + segs[0] + "/" + segs[1]
		if len(segs) == 3 {
			p += "/"
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// requestInfo is what the middleware learns about a request as it passes through.
type requestInfo struct {
	route string
	// keyIssuer is the issuer whose API key authenticated the request; "" for the admin key.
	keyIssuer string
}

type ctxKey struct{}

func info(r *http.Request) *requestInfo {
	ri, _ := r.Context().Value(ctxKey{}).(*requestInfo)
	if ri == nil {
		return &requestInfo{}
	}
	return ri
}

// withRequest counts the response by route and status (the request id is httpx.RequestIDs', outside).
func (a *API) withRequest(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ri := &requestInfo{route: "unmatched"}
		sw := httpx.NewStatusWriter(w)
		next.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), ctxKey{}, ri)))
		a.m.requests.WithLabelValues(ri.route, fmt.Sprint(sw.Status())).Inc()
	})
}

// authenticate accepts requests bearing one of the admin keys or an issuer's API key, and answers that
// issuer ("" for the admin key); every route, unknown ones included, asks it first. The header is read by
// the one bearer rule and an admin key compared with every configured key as httpx.KeyIn does
// (docs/PROTOCOL.md#auth-header), so neither a key's bytes nor its length leak through timing.
func (a *API) authenticate(r *http.Request) (keyIssuer string, err error) {
	got, ok := httpx.BearerOf(r)
	if !ok {
		a.m.authFailures.WithLabelValues("missing").Inc()
		return "", wire.Errorf(wire.Unauthenticated, "no admin key: send Authorization: Bearer <admin key>")
	}
	if id, ok := ParseAPIKeySecret(got); ok {
		return a.authenticateAPIKey(r, id, got)
	}
	keys, err := a.cfg.AdminKeys(r.Context())
	if err != nil {
		return "", wire.Wrap(wire.Unavailable, err, "the admin keys cannot be read")
	}
	if !httpx.KeyIn(got, keys) {
		a.m.authFailures.WithLabelValues("wrong").Inc()
		a.logger(r).Info("admin key rejected", "remote", r.RemoteAddr)
		return "", wire.Errorf(wire.Unauthenticated, "the admin key was rejected")
	}
	return "", nil
}

// dispatch serves one path pattern: it authenticates, checks an issuer key's scope, then chooses the route
// by method.
func (a *API) dispatch(byMethod map[string]route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rt, ok := byMethod[r.Method]
		if ok {
			info(r).route = rt.method + " " + rt.pattern
		}
		iss, err := a.authenticate(r)
		if err != nil {
			a.fail(w, r, err)
			return
		}
		info(r).keyIssuer = iss
		if !ok {
			allowed := make([]string, 0, len(byMethod))
			for m := range byMethod {
				allowed = append(allowed, m)
			}
			httpx.MethodNotAllowed(w, r, allowed)
			return
		}
		if err := a.authorize(r, rt); err != nil {
			a.fail(w, r, err)
			return
		}
		if err := rt.serve(a, w, r); err != nil {
			a.fail(w, r, err)
		}
	})
}

// fail writes err as the wire error body (docs/PROTOCOL.md#errors); causes of internal errors are logged,
// never sent.
func (a *API) fail(w http.ResponseWriter, r *http.Request, err error) {
	wire.WriteHTTPError(w, a.logger(r), err)
}

func (a *API) now() time.Time { return a.cfg.Now() }

func (a *API) logger(r *http.Request) *slog.Logger {
	return a.log.With("request_id", httpx.RequestID(r.Context()), "route", info(r).route)
}

func (a *API) openAPI(w http.ResponseWriter, _ *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPI)
	return nil
}

// invalidField is an invalid_argument naming the offending field in details.
func invalidField(field, format string, args ...any) *wire.Error {
	return wire.Errorf(wire.InvalidArgument, format, args...).WithDetails(map[string]any{"field": field})
}

// decodeBody reads a JSON object of at most MaxBodyBytes into dst, refusing unknown fields and trailing data.
func (a *API) decodeBody(w http.ResponseWriter, r *http.Request, dst any) error {
	limit := a.cfg.MaxBodyBytes
	if r.ContentLength > limit {
		return wire.Errorf(wire.PayloadTooLarge, "request body of %d bytes is over the limit of %d", r.ContentLength, limit)
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	err := strictjson.Read(body, dst, strictjson.RejectUnknown)
	var (
		maxErr *http.MaxBytesError
		je     *strictjson.Error
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &maxErr):
		return wire.Errorf(wire.PayloadTooLarge, "request body is over the limit of %d bytes", limit)
	case !errors.As(err, &je):
	case je.Kind == strictjson.Syntax && je.Pointer == "" && errors.Is(err, io.ErrUnexpectedEOF) && r.ContentLength <= 0:
		return wire.Errorf(wire.InvalidArgument, "request body is empty: want a JSON object")
	case je.Pointer == "" && je.Kind == strictjson.Value:
		return wire.Errorf(wire.InvalidArgument, "request body must be a JSON object")
	case je.Pointer != "" && je.Kind != strictjson.Syntax:
		// Named by its dotted path (docs/PROTOCOL.md#billing-api): an unknown, duplicate or mistyped field.
		field := strings.ReplaceAll(strings.TrimPrefix(je.Pointer, "/"), "/", ".")
		return invalidField(field, "%s: %s", field, je)
	default:
		return wire.Errorf(wire.InvalidArgument, "request body is not valid JSON: %s", je)
	}
	return wire.Wrap(wire.InvalidArgument, err, "request body cannot be read")
}

// pathName reads and checks a path value naming an issuer, user or model.
func pathName(r *http.Request, name string) (string, error) {
	v := r.PathValue(name)
	if !ValidName(v) {
		return "", invalidField(name, "%s must be 1 to %d bytes of UTF-8 without control characters", name, MaxNameLen)
	}
	return v, nil
}

// storeError maps a port's error to the wire; notFound is the message for ErrNotFound.
func storeError(err error, notFound string) error {
	switch {
	case errors.Is(err, ErrNotFound):
		return wire.Wrap(wire.NotFound, err, notFound)
	case errors.Is(err, ErrConflict):
		return wire.Wrap(wire.Conflict, err, "stale revision")
	case errors.Is(err, ErrInvalid):
		return wire.Wrap(wire.InvalidArgument, err, err.Error())
	case errors.Is(err, ErrUnavailable):
		return wire.Wrap(wire.Unavailable, err, "the billing database is unavailable")
	}
	return err
}

type apiMetrics struct {
	requests     *prometheus.CounterVec
	authFailures *prometheus.CounterVec
}

func newAPIMetrics(reg prometheus.Registerer) (*apiMetrics, error) {
	m := &apiMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_billing_api_requests_total", Help: "Billing API requests by route and status code.",
		}, []string{"route", "code"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_billing_api_auth_failures_total", Help: "Billing API requests refused for their admin key, by reason.",
		}, []string{"reason"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.requests, m.authFailures} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("billing api: register metrics: %w", err)
			}
		}
	}
	return m, nil
}
