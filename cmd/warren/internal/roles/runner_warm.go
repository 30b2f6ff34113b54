package roles

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/internal/registry/consul"
	"github.com/warren-mesh/warren/internal/strictjson"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/wire"
)

// assignment is what the scheduler sends a warm runner (POST /v1/assign): the sandbox it now is.
type assignment struct {
	Issuer string `json:"issuer"`
	User   string `json:"user"`
	Epoch  int64  `json:"epoch"`
	Region string `json:"region"`
	// Template is the token's template claim (scheduler.Spec.Template): the runner's -template.
	Template string `json:"template,omitempty"`
}

// parseAssignment decodes an assignment body strictly (it crosses the network).
func parseAssignment(b []byte) (assignment, error) {
	var a assignment
	if err := strictjson.Unmarshal(b, &a, strictjson.RejectUnknown); err != nil {
		return assignment{}, wire.Wrap(wire.InvalidArgument, err, "malformed assignment")
	}
	if a.Issuer == "" || a.User == "" || len(a.Issuer) > 256 || len(a.User) > 256 || a.Epoch < 1 || len(a.Region) > 64 {
		return assignment{}, wire.Errorf(wire.InvalidArgument, "an assignment needs issuer and user (≤ 256 bytes) and an epoch ≥ 1")
	}
	if a.Template != "" && !token.ValidTemplate(a.Template) {
		return assignment{}, wire.Errorf(wire.InvalidArgument, "the assignment's template is not a template name")
	}
	return a, nil
}

// warmAssignGrace is how long a warm runner whose announcement is gone (claimed) waits for its assignment
// before it exits: the claimant died or gave up, and nobody else can claim it any more.
var warmAssignGrace = 30 * time.Second

// awaitAssignment is the warm-pool half of a runner (`warren runner -warm`): it listens on listen,
// announces itself in Consul as a warm runner of region (address, allocation, key, under a session that
// dies with this process), and waits for a scheduler to claim it and POST /v1/assign. It returns the
// assignment and the address it listened on, which the runner then serves from; the listener is closed.
// It fails when the Consul session is lost, or when the announcement was claimed and no assignment came
// within warmAssignGrace.
func awaitAssignment(ctx context.Context, listen, key, alloc, region string, prod *prodFlags, log *slog.Logger) (assignment, string, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return assignment{}, "", fmt.Errorf("warm runner: listen: %w", err)
	}
	reg, err := prod.openConsul(false)
	if err != nil {
		ln.Close()
		return assignment{}, "", err
	}
	defer reg.Close(context.WithoutCancel(ctx))
	return serveWarm(ctx, ln, key, alloc, region, reg, warmAssignGrace, log)
}

// serveWarm is awaitAssignment on an open listener (closed on return) and registry.
func serveWarm(ctx context.Context, ln net.Listener, key, alloc, region string, reg *consul.Registry, grace time.Duration, log *slog.Logger) (assignment, string, error) {
	addr := ln.Addr().String()
	got := make(chan assignment, 1)
	// The scheduler's one small request: nothing streams, so whole requests and answers are bounded too.
	srv := httpx.NewServer(warmHandler(key, got, log), httpx.Config{ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second})
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx) // lets the 202 reach the scheduler
	}()

	lease, err := reg.HoldWarm(ctx, registry.Warm{Region: region, Alloc: alloc, Addr: addr, Key: key, Job: os.Getenv("NOMAD_JOB_ID")})
	if err != nil {
		return assignment{}, "", fmt.Errorf("warm runner: announce in Consul: %w", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := lease.Release(rctx); err != nil {
			log.Warn("warm: release the announcement", "err", err)
		}
	}()
	log.Info("warm: waiting for an assignment", "addr", addr, "alloc", alloc)
	claimed := lease.Claimed()
	var giveUp <-chan time.Time
	for {
		select {
		case a := <-got:
			log.Info("warm: assigned", "issuer", a.Issuer, "user", a.User, "epoch", a.Epoch)
			return a, addr, nil
		case <-lease.Lost():
			return assignment{}, "", errors.New("warm runner: lost the Consul session before an assignment")
		case <-claimed:
			claimed = nil
			t := time.NewTimer(grace)
			defer t.Stop()
			giveUp = t.C
			log.Info("warm: claimed, waiting for the assignment", "grace", grace.String())
		case <-giveUp:
			return assignment{}, "", fmt.Errorf("warm runner: claimed, but no assignment within %v", grace)
		case <-ctx.Done():
			return assignment{}, "", ctx.Err()
		}
	}
}

// warmHandler serves a waiting warm runner: GET /healthz, and POST /v1/assign, which takes the first valid
// assignment (202, sent on got, which must have room for one) and answers every later one 409 conflict.
func warmHandler(key string, got chan<- assignment, log *slog.Logger) http.Handler {
	var assigned atomic.Bool
	checkKey := func(r *http.Request) error { // docs/PROTOCOL.md#auth-header
		if tok, ok := httpx.BearerOf(r); !ok || !httpx.KeyEqual(tok, key) {
			return wire.Errorf(wire.Unauthenticated, "wrong key")
		}
		return nil
	}
	mux := &httpx.Mux{What: "warm runner", Authorize: checkKey}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "warm\n") })
	mux.HandleFunc("POST /v1/assign", func(w http.ResponseWriter, r *http.Request) {
		if err := checkKey(r); err != nil {
			wire.WriteHTTPError(w, log, err)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 4<<10))
		if err != nil {
			wire.WriteHTTPError(w, log, wire.Wrap(wire.InvalidArgument, err, "read assignment"))
			return
		}
		a, err := parseAssignment(body)
		if err != nil {
			wire.WriteHTTPError(w, log, err)
			return
		}
		if !assigned.CompareAndSwap(false, true) {
			wire.WriteHTTPError(w, log, wire.Errorf(wire.Conflict, "this runner is already assigned"))
			return
		}
		got <- a // room for one, and only the first assignment gets here
		w.WriteHeader(http.StatusAccepted)
	})
	return httpx.RequestIDs(mux)
}
