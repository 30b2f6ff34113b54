package edge

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// A careless operator's -preview-domain (`nomad job run -var preview_domain=...` by hand, where Terraform's
// check does not run): a scheme, a port, a path, a wildcard, an upper-case or empty label, a runtime
// interpolation or a name too long for the preview label would make every preview URL unreachable (or, with
// "${...}", something Nomad expands). The edge refuses to start with such a domain, as Terraform refuses it
// at plan time, and accepts a plain DNS name.
func TestPreviewDomainRefusedAtNew(t *testing.T) {
	newEdge := func(domain string) error {
		ledger, d := regionsFixture(t)
		_, err := New(Config{Region: "r1", Verifier: grantVerifier{}, Sandboxes: grantRunner{}, Ledger: ledger, Directory: d,
			Metrics: prometheus.NewRegistry(), Previews: &PreviewConfig{Domain: domain}})
		return err
	}
	for _, bad := range []string{
		"https://preview.example.com", "preview.example.com:443", "preview.example.com/p", "*.preview.example.com",
		".preview.example.com", "preview.example.com.", "preview..example.com", "Preview.Example.com", "-a.example.com",
		"a-.example.com", "${NOMAD_SECRETS_DIR}.example.com", "preview example.com", "preview.example.com\n-listen=:1",
		strings.Repeat("a", 64) + ".example.com", strings.Repeat("abcdefghi.", 20) + "com",
	} {
		if err := newEdge(bad); err == nil || !strings.Contains(err.Error(), "preview domain") {
			t.Errorf("New accepted -preview-domain %q (err %v)", bad, err)
		}
	}
	for _, good := range []string{"", "preview.example.com", "preview.localhost", "p-1.x.io", strings.Repeat("abcdefgh.", 21) + "com"} {
		if err := newEdge(good); err != nil {
			t.Errorf("New refused -preview-domain %q: %v", good, err)
		}
	}
}
