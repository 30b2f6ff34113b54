package devstack

import (
	"bytes"
	"os"
	"testing"
)

// TestWebhookMasterKept: the first start writes a random webhook secret (0600), later starts read the
// same one, and another data dir gets another.
func TestWebhookMasterKept(t *testing.T) {
	dir := t.TempDir()
	first, err := ensureWebhookMaster(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 64 {
		t.Fatalf("webhook secret of %d bytes, want 64 hex digits", len(first))
	}
	fi, err := os.Stat(WebhookSecretPath(dir))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("webhook secret file: %v, %v (want mode 0600)", fi, err)
	}
	again, err := ensureWebhookMaster(dir)
	if err != nil || !bytes.Equal(again, first) {
		t.Fatalf("second start: %q, %v; want the first start's secret", again, err)
	}
	other, err := ensureWebhookMaster(t.TempDir())
	if err != nil || bytes.Equal(other, first) {
		t.Fatalf("another data dir: %q, %v; want another secret", other, err)
	}
	// A secret file too short to sign with stops the start rather than being replaced.
	if err := os.WriteFile(WebhookSecretPath(dir), []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ensureWebhookMaster(dir); err == nil {
		t.Fatal("a 5-byte webhook secret was accepted")
	}
}
