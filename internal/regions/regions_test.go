package regions_test

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"
	"testing/synctest"
	"time"

	"github.com/warren-mesh/warren/internal/regions"
	"github.com/warren-mesh/warren/internal/regions/sqlite"
)

func TestSummarize(t *testing.T) {
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	edges := []regions.Edge{
		{Region: "us", ID: "a", URL: "wss://us-old", Expires: at},
		{Region: "us", ID: "b", URL: "wss://us-new", WebTransport: "https://us-new/wt", Expires: at.Add(time.Second)},
		{Region: "eu", ID: "a", URL: "wss://eu-draining", Draining: true, Expires: at.Add(time.Hour)},
		{Region: "eu", ID: "b", URL: "wss://eu", Expires: at},
		{Region: "ap", ID: "a", URL: "wss://ap", Draining: true, Expires: at},
	}
	want := []regions.Status{
		{Name: "ap", URL: "wss://ap", Health: "draining", Edges: 1},
		{Name: "eu", URL: "wss://eu", Health: "ok", Edges: 2},
		{Name: "us", URL: "wss://us-new", WebTransport: "https://us-new/wt", Health: "ok", Edges: 2},
	}
	if got := regions.Summarize(edges); !reflect.DeepEqual(got, want) {
		t.Fatalf("Summarize:\n got %+v\nwant %+v", got, want)
	}
	if got := regions.Summarize(nil); len(got) != 0 {
		t.Fatalf("Summarize(nil) = %+v", got)
	}
}

// The announcer keeps its entry fresh past many TTLs, shows a drain at once, and withdraws the entry
// when it stops.
func TestAnnouncer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		d, err := sqlite.New(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "regions.db")})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		a := &regions.Announcer{Dir: d, TTL: 30 * time.Second,
			Edge: regions.Edge{Region: "eu", ID: "edge-1", URL: "wss://eu.example.com", Mesh: "127.0.0.1:4433"}}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.Run(runCtx) }()
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		got, err := d.Edges(ctx)
		if err != nil || len(got) != 1 || got[0].Draining {
			t.Fatalf("after 10 TTLs: %+v, %v; want the edge, serving", got, err)
		}
		a.Drain()
		synctest.Wait()
		if got, _ := d.Edges(ctx); len(got) != 1 || !got[0].Draining {
			t.Fatalf("after Drain: %+v, want it draining", got)
		}
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got, _ := d.Edges(ctx); len(got) != 0 {
			t.Fatalf("after Run ended: %+v, want withdrawn", got)
		}
		bad := &regions.Announcer{Dir: d, Edge: regions.Edge{Region: "EU", ID: "x", URL: "wss://x"}}
		if err := bad.Run(ctx); err == nil {
			t.Fatal("an invalid edge was announced")
		}
	})
}
