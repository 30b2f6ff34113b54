// Package drivertest is the contract suite every scheduler.Driver adapter passes: a started sandbox listens
// and answers its health check, requires its key, is gone after Stop, and a start abandoned by its context
// leaves nothing running.
package drivertest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/registry"
	"github.com/warren-mesh/warren/scheduler"
)

var seq atomic.Int64

// Spec returns a fresh spec for a test user.
func Spec(region string) scheduler.Spec {
	n := seq.Add(1)
	user := fmt.Sprintf("driver-test-%d-%d", time.Now().UnixNano(), n)
	return scheduler.Spec{ID: registry.SandboxID("iss", user), Issuer: "iss", User: user, Epoch: 1, Region: region}
}

// Run runs the contract against d.
func Run(t *testing.T, d scheduler.Driver) {
	t.Run("StartServesStopEnds", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		sb, err := d.Start(ctx, Spec("r1"))
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		if sb.Alloc == "" || sb.Addr == "" || sb.Key == "" || sb.Exited == nil {
			t.Fatalf("incomplete sandbox %+v", sb)
		}
		if code := get(t, ctx, "http://"+sb.Addr+"/healthz", ""); code != http.StatusOK {
			t.Fatalf("healthz = %d", code)
		}
		if code := get(t, ctx, "http://"+sb.Addr+"/v1/sandbox/files/list?path=.", "wrong"); code != http.StatusUnauthorized {
			t.Fatalf("wrong key = %d, want 401", code)
		}
		if code := get(t, ctx, "http://"+sb.Addr+"/v1/sandbox/files/list?path=.", sb.Key); code != http.StatusOK {
			t.Fatalf("right key = %d, want 200", code)
		}
		if err := d.Stop(ctx, sb.Alloc); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		select {
		case <-sb.Exited:
		case <-ctx.Done():
			t.Fatal("Exited not closed after Stop")
		}
		if err := d.Stop(ctx, sb.Alloc); err != nil {
			t.Fatalf("second Stop = %v, want nil", err)
		}
	})
	t.Run("TwoSandboxesAreSeparate", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		a, err := d.Start(ctx, Spec("r1"))
		if err != nil {
			t.Fatal(err)
		}
		defer d.Stop(context.Background(), a.Alloc)
		b, err := d.Start(ctx, Spec("r1"))
		if err != nil {
			t.Fatal(err)
		}
		defer d.Stop(context.Background(), b.Alloc)
		if a.Alloc == b.Alloc || a.Addr == b.Addr || a.Key == b.Key {
			t.Fatalf("sandboxes share alloc, address or key: %+v %+v", a, b)
		}
	})
	t.Run("CancelledStartLeavesNothing", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := d.Start(ctx, Spec("r1"))
		if err == nil || !errors.Is(err, context.Canceled) {
			t.Fatalf("Start with a cancelled context = %v, want context.Canceled", err)
		}
	})
}

func get(t *testing.T, ctx context.Context, url, key string) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
