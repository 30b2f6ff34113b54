// Package remote is the scheduler's internal HTTP API, so edges and schedulers can run as separate processes
// (`warren edge` and `warren scheduler`): Handler serves a *scheduler.Scheduler, Client calls it. Both ends
// share a bearer key; the API is for the region's private network only, since it hands out runner
// addresses and keys.
//
//	POST /v1/sandboxes/ensure  {"issuer","user","account","computeLimit"} → 200 entry | wire error
//	POST /v1/sandboxes/forget  entry → 204
//	GET  /healthz              → 200
//
// An edge first asks its registry (Consul, watched): a live runner is dialled without a scheduler hop;
// only a miss asks the scheduler to start one. So compute time is charged to the account named when the
// sandbox started or last missed (docs/ARCHITECTURE.md#compute-metering).
package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/strictjson"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/scheduler"
)

// MaxBody bounds a request body of the API.
const MaxBody = 64 << 10

// Scheduler is what Handler serves (a *scheduler.Scheduler).
type Scheduler interface {
	Ensure(ctx context.Context, req scheduler.Request) (registry.Entry, error)
	Forget(ctx context.Context, e registry.Entry)
}

// StatusReader is what Handler serves POST /v1/sandboxes/status with, when its Scheduler has it (a
// *scheduler.Scheduler does).
type StatusReader interface {
	Status(ctx context.Context, issuer, user string, now time.Time) (scheduler.Status, error)
}

// StatusRequest is the body of POST /v1/sandboxes/status.
type StatusRequest struct {
	Issuer string `json:"issuer"`
	User   string `json:"user"`
}

// StatusAnswer is scheduler.Status on the wire.
type StatusAnswer struct {
	State  string    `json:"state"`
	Region string    `json:"region,omitempty"`
	Epoch  int64     `json:"epoch"`
	Since  time.Time `json:"since,omitzero"`
}

// EnsureRequest is the body of POST /v1/sandboxes/ensure.
type EnsureRequest struct {
	Issuer       string    `json:"issuer"`
	User         string    `json:"user"`
	Account      Account   `json:"account"`
	ComputeLimit int64     `json:"computeLimit"`
	Anchor       time.Time `json:"anchor,omitzero"`
	Template     string    `json:"template,omitempty"`
}

// Account is billing.Account on the wire.
type Account struct {
	Issuer      string    `json:"issuer"`
	User        string    `json:"user"`
	Window      string    `json:"window"`
	WindowStart time.Time `json:"windowStart"`
}

// Entry is registry.Entry on the wire (the key included: internal network only).
type Entry struct {
	Issuer string    `json:"issuer"`
	User   string    `json:"user"`
	Epoch  int64     `json:"epoch"`
	Region string    `json:"region"`
	Alloc  string    `json:"alloc"`
	Addr   string    `json:"addr"`
	Key    string    `json:"key"`
	Since  time.Time `json:"since"`
}

func toWire(e registry.Entry) Entry {
	return Entry{Issuer: e.Issuer, User: e.User, Epoch: e.Epoch, Region: e.Region, Alloc: e.Alloc, Addr: e.Addr, Key: e.Key, Since: e.Since}
}

func (e Entry) entry() registry.Entry {
	return registry.Entry{Issuer: e.Issuer, User: e.User, Epoch: e.Epoch, Region: e.Region, Alloc: e.Alloc, Addr: e.Addr, Key: e.Key, Since: e.Since}
}

// ParseEnsure decodes and checks an ensure body (untrusted: it crosses the network).
func ParseEnsure(b []byte) (scheduler.Request, error) {
	var r EnsureRequest
	if err := decodeStrict(b, &r); err != nil {
		return scheduler.Request{}, err
	}
	if r.Issuer == "" || r.User == "" || len(r.Issuer) > 256 || len(r.User) > 256 {
		return scheduler.Request{}, wire.Errorf(wire.InvalidArgument, "issuer and user are required (at most 256 bytes each)")
	}
	if r.Template != "" && !token.ValidTemplate(r.Template) {
		return scheduler.Request{}, wire.Errorf(wire.InvalidArgument, "template is not a template name (1 to %d bytes of [a-z0-9._-])", token.MaxTemplateLen)
	}
	w := billing.Window(r.Account.Window)
	if r.Account.Window != "" && !w.Valid() {
		return scheduler.Request{}, wire.Errorf(wire.InvalidArgument, "unknown budget window %q", r.Account.Window)
	}
	return scheduler.Request{
		Issuer: r.Issuer, User: r.User, ComputeLimit: r.ComputeLimit, Anchor: r.Anchor, Template: r.Template,
		Account: billing.Account{Issuer: r.Account.Issuer, User: r.Account.User, Window: w, WindowStart: r.Account.WindowStart},
	}, nil
}

// ParseStatus decodes and checks a status body (untrusted: it crosses the network).
func ParseStatus(b []byte) (StatusRequest, error) {
	var r StatusRequest
	if err := decodeStrict(b, &r); err != nil {
		return StatusRequest{}, err
	}
	if r.Issuer == "" || r.User == "" || len(r.Issuer) > 256 || len(r.User) > 256 {
		return StatusRequest{}, wire.Errorf(wire.InvalidArgument, "issuer and user are required (at most 256 bytes each)")
	}
	return r, nil
}

// ParseEntry decodes and checks a forget body.
func ParseEntry(b []byte) (registry.Entry, error) {
	var e Entry
	if err := decodeStrict(b, &e); err != nil {
		return registry.Entry{}, err
	}
	if e.Issuer == "" || e.User == "" || e.Epoch < 0 {
		return registry.Entry{}, wire.Errorf(wire.InvalidArgument, "issuer, user and a non-negative epoch are required")
	}
	return e.entry(), nil
}

func decodeStrict(b []byte, v any) error {
	if err := strictjson.Unmarshal(b, v, strictjson.RejectUnknown); err != nil {
		return wire.JSONError(err, "malformed request body")
	}
	return nil
}

// Handler serves s to callers presenting key (required; the bearer rule and constant-time compare of
// docs/PROTOCOL.md#auth-header). Unknown paths and methods are wire errors, asked for the key first.
// Requests carry ids (httpx.RequestIDs); an edge's client sends its own request's.
func Handler(s Scheduler, key string, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	checkKey := func(r *http.Request) error {
		if got, ok := httpx.BearerOf(r); !ok || !httpx.KeyEqual(got, key) {
			return wire.Errorf(wire.Unauthenticated, "missing or wrong scheduler key")
		}
		return nil
	}
	mux := &httpx.Mux{What: "scheduler API", Authorize: checkKey}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	authed := func(h func(w http.ResponseWriter, r *http.Request, body []byte, log *slog.Logger)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			log := log.With("request_id", httpx.RequestID(r.Context()))
			if err := checkKey(r); err != nil {
				wire.WriteHTTPError(w, log, err)
				return
			}
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
			if err != nil {
				wire.WriteHTTPError(w, log, wire.Wrap(wire.InvalidArgument, err, "read request body"))
				return
			}
			h(w, r, body, log)
		}
	}
	mux.HandleFunc("POST /v1/sandboxes/ensure", authed(func(w http.ResponseWriter, r *http.Request, body []byte, log *slog.Logger) {
		req, err := ParseEnsure(body)
		if err != nil {
			wire.WriteHTTPError(w, log, err)
			return
		}
		e, err := s.Ensure(r.Context(), req)
		if err != nil {
			wire.WriteHTTPError(w, log, err)
			return
		}
		_ = httpx.WriteJSON(w, http.StatusOK, toWire(e))
	}))
	mux.HandleFunc("POST /v1/sandboxes/forget", authed(func(w http.ResponseWriter, r *http.Request, body []byte, log *slog.Logger) {
		e, err := ParseEntry(body)
		if err != nil {
			wire.WriteHTTPError(w, log, err)
			return
		}
		s.Forget(r.Context(), e)
		w.WriteHeader(http.StatusNoContent)
	}))
	if sr, ok := s.(StatusReader); ok {
		mux.HandleFunc("POST /v1/sandboxes/status", authed(func(w http.ResponseWriter, r *http.Request, body []byte, log *slog.Logger) {
			req, err := ParseStatus(body)
			if err != nil {
				wire.WriteHTTPError(w, log, err)
				return
			}
			st, err := sr.Status(r.Context(), req.Issuer, req.User, time.Now())
			if err != nil {
				wire.WriteHTTPError(w, log, wire.Wrap(wire.Unavailable, err, "placements are unavailable"))
				return
			}
			_ = httpx.WriteJSON(w, http.StatusOK, StatusAnswer{State: string(st.State), Region: st.Region, Epoch: st.Epoch, Since: st.Since})
		}))
	}
	return httpx.RequestIDs(mux)
}

// Cache is a registry an edge reads first (the Consul adapter with Watch); Invalidate drops an entry
// after a failed dial.
type Cache interface {
	Lookup(ctx context.Context, issuer, user string) (registry.Entry, error)
	Invalidate(issuer, user string)
}

// Client calls a scheduler's API. Safe for concurrent use.
type Client struct {
	URL      string       // base URL of the scheduler, e.g. http://10.0.0.5:7300
	Key      string       // the shared scheduler key
	Registry Cache        // optional: live runners are found here without a scheduler call
	HTTP     *http.Client // default: a client with a 2-minute timeout (a cold start can take a while)
}

var defaultHTTP = &http.Client{Timeout: 2 * time.Minute}

// Ensure returns the live runner of req's user, from the registry when it knows one, else from the
// scheduler (which starts it). Errors are *wire.Error.
func (c *Client) Ensure(ctx context.Context, req scheduler.Request) (registry.Entry, error) {
	if c.Registry != nil {
		if e, err := c.Registry.Lookup(ctx, req.Issuer, req.User); err == nil {
			return e, nil
		}
	}
	body, _ := json.Marshal(EnsureRequest{
		Issuer: req.Issuer, User: req.User, ComputeLimit: req.ComputeLimit, Anchor: req.Anchor, Template: req.Template,
		Account: Account{Issuer: req.Account.Issuer, User: req.Account.User, Window: string(req.Account.Window), WindowStart: req.Account.WindowStart},
	})
	var out Entry
	if err := c.call(ctx, "/v1/sandboxes/ensure", body, &out); err != nil {
		return registry.Entry{}, err
	}
	return out.entry(), nil
}

// Forget drops the cached entry and tells the scheduler e could not be reached.
func (c *Client) Forget(ctx context.Context, e registry.Entry) {
	if c.Registry != nil {
		c.Registry.Invalidate(e.Issuer, e.User)
	}
	body, _ := json.Marshal(toWire(e))
	_ = c.call(ctx, "/v1/sandboxes/forget", body, nil)
}

// Status asks the scheduler what it knows of the user's sandbox; it starts nothing. Errors are *wire.Error.
func (c *Client) Status(ctx context.Context, issuer, user string) (scheduler.Status, error) {
	body, _ := json.Marshal(StatusRequest{Issuer: issuer, User: user})
	var out StatusAnswer
	if err := c.call(ctx, "/v1/sandboxes/status", body, &out); err != nil {
		return scheduler.Status{}, err
	}
	return scheduler.Status{State: scheduler.State(out.State), Region: out.Region, Epoch: out.Epoch, Since: out.Since}, nil
}

func (c *Client) call(ctx context.Context, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(c.URL, "/")+path, bytes.NewReader(body))
	if err != nil {
		return wire.Wrap(wire.Internal, err, "scheduler request")
	}
	req.Header.Set("Authorization", "Bearer "+c.Key)
	req.Header.Set("Content-Type", "application/json")
	if id := httpx.RequestID(ctx); id != "" {
		req.Header.Set(httpx.HeaderRequestID, id) // one id in the edge's and the scheduler's logs
	}
	hc := c.HTTP
	if hc == nil {
		hc = defaultHTTP
	}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return wire.Wrap(wire.Timeout, err, "gave up waiting for the scheduler")
		}
		return wire.Wrap(wire.Unavailable, err, "scheduler unreachable")
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxBody))
	if err != nil {
		return wire.Wrap(wire.Unavailable, err, "read scheduler response")
	}
	if resp.StatusCode/100 != 2 {
		we := wire.ReadHTTPError(resp.StatusCode, data)
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			// Our own credentials between edge and scheduler, not the end user's: never their fault.
			return wire.Wrap(wire.Internal, we, "the edge could not authenticate to the scheduler (check WARREN_SCHEDULER_KEY)")
		}
		return we
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return wire.Wrap(wire.Unavailable, fmt.Errorf("decode: %w", err), "malformed scheduler response")
	}
	return nil
}

var errNoKey = errors.New("remote: a scheduler key is required")

// CheckKey refuses an empty or short shared key.
func CheckKey(key string) error {
	if len(key) < 16 {
		return fmt.Errorf("%w (at least 16 characters)", errNoKey)
	}
	return nil
}
