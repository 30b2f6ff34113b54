package roles

import (
	"flag"
	"io"
	"log/slog"
	"testing"

	"github.com/warren-mesh/warren/internal/devstack"
)

// warren dev bills its scripted model at the demo price its banner states; the library's default (the
// tests') is the price table.
func TestDevSetsTheDemoPrice(t *testing.T) {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	var f devFlags
	f.register(fs)
	if err := fs.Parse([]string{"-sandbox-host-network", "-no-agent", "-data-dir", t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	cfg, err := f.config(io.Discard, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DemoPrice != devstack.DemoModelPrice {
		t.Fatalf("warren dev's demo price %q, want %q", cfg.DemoPrice, devstack.DemoModelPrice)
	}
}
