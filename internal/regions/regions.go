// Package regions is how the edges of all regions find each other (docs/ARCHITECTURE.md#regions): every
// edge announces itself — its region, its region's public URLs, its mesh address — in a Directory kept in
// the database that already spans the regions, renewing the entry before it expires; GET /v1/regions and
// the mesh read the entries that have not expired.
//
// The shared database rather than Consul WAN federation: every edge already reaches it (admission reads
// the ledger there), it is strongly consistent and multi-region by construction (CockroachDB), and it needs
// no cross-datacenter gossip to be opened between Consul clusters. A region whose edges cannot reach the
// database cannot admit anyone either, so nothing is lost by not listing it.
package regions

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
)

// Edge is one edge process as it announced itself.
type Edge struct {
	Region string // the edge's region
	ID     string // unique per edge process within its region (a host name, an allocation id)
	// URL is the public base URL clients connect to in this region (http, https, ws or wss), the same for
	// every edge of a region behind its load balancer.
	URL string
	// WebTransport is the region's public WebTransport URL (https), empty while it serves none.
	WebTransport string
	// Mesh is the edge's mesh address (host:port, UDP) for other regions' edges; empty: not reachable by
	// the mesh.
	Mesh string
	// Draining edges are leaving: clients are steered elsewhere and no new work is forwarded to them.
	Draining bool
	// Expires is when the entry lapses unless announced again (set by Announce from its ttl).
	Expires time.Time
}

// Directory stores the announced edges. Implementations are safe for concurrent use by many processes.
type Directory interface {
	// Announce inserts or replaces the entry of (e.Region, e.ID), expiring ttl from now.
	Announce(ctx context.Context, e Edge, ttl time.Duration) error
	// Withdraw removes the entry of (region, id); a missing one is not an error.
	Withdraw(ctx context.Context, region, id string) error
	// Edges lists the entries that have not expired, ordered by region and id.
	Edges(ctx context.Context) ([]Edge, error)
}

// ErrInvalid: an Edge that cannot be announced (see Validate).
var ErrInvalid = errors.New("invalid edge announcement")

var (
	nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$`)
	idRE   = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)
)

// ValidRegion reports whether name is a region name: 1 to 32 of [a-z0-9-], not starting or ending with -.
func ValidRegion(name string) bool { return nameRE.MatchString(name) }

// Validate checks what an edge announces: a region name, an id, URLs of the right schemes, a host:port.
func (e Edge) Validate() error {
	if !ValidRegion(e.Region) {
		return fmt.Errorf("%w: region %q: 1 to 32 of [a-z0-9-]", ErrInvalid, e.Region)
	}
	if !idRE.MatchString(e.ID) {
		return fmt.Errorf("%w: id %q: 1 to 128 of [A-Za-z0-9._:-]", ErrInvalid, e.ID)
	}
	if err := checkURL(e.URL, "http", "https", "ws", "wss"); err != nil {
		return fmt.Errorf("%w: url: %v", ErrInvalid, err)
	}
	if e.WebTransport != "" {
		if err := checkURL(e.WebTransport, "https"); err != nil {
			return fmt.Errorf("%w: webtransport url: %v", ErrInvalid, err)
		}
	}
	if e.Mesh != "" {
		if err := checkHostPort(e.Mesh); err != nil {
			return fmt.Errorf("%w: mesh address: %v", ErrInvalid, err)
		}
	}
	return nil
}

// MaxTTL bounds an announcement's ttl: an entry outlives its edge by at most this.
const MaxTTL = 10 * time.Minute

// CheckAnnouncement is what every Directory checks before Announce stores anything: a valid edge and a ttl
// in (0, MaxTTL].
func CheckAnnouncement(e Edge, ttl time.Duration) error {
	if err := e.Validate(); err != nil {
		return err
	}
	if ttl <= 0 || ttl > MaxTTL {
		return fmt.Errorf("%w: ttl %v (at most %v)", ErrInvalid, ttl, MaxTTL)
	}
	return nil
}

// checkHostPort accepts host:port with a host clients or peers can reach: not empty, not an unspecified
// (0.0.0.0, ::) or link-local address, and a port 1 to 65535.
func checkHostPort(hp string) error {
	if len(hp) > 255 {
		return errors.New("over 255 bytes")
	}
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return err
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("port %q", port)
	}
	if host == "" {
		return errors.New("no host")
	}
	if ip, err := netip.ParseAddr(host); err == nil && (ip.IsUnspecified() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsMulticast()) {
		return fmt.Errorf("host %s is not an address others can reach", host)
	}
	return nil
}

func checkURL(s string, schemes ...string) error {
	if len(s) > 2048 {
		return errors.New("over 2048 bytes")
	}
	u, err := url.Parse(s)
	if err != nil {
		return err
	}
	if !slices.Contains(schemes, u.Scheme) || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%q: want an absolute %v URL without user, query or fragment", s, schemes)
	}
	hp := u.Host
	if u.Port() == "" {
		hp = net.JoinHostPort(u.Hostname(), "443")
	}
	return checkHostPort(hp)
}

// Status is one region as GET /v1/regions reports it.
type Status struct {
	Name         string `json:"name"`
	URL          string `json:"url"`
	WebTransport string `json:"webtransport,omitempty"`
	// CertificateHashes pin the WebTransport certificate of a development edge (self-signed, valid at most
	// 14 days): listed only for the answering edge's own region, when it serves such a certificate.
	CertificateHashes []wire.CertificateHash `json:"certificateHashes,omitempty"`
	// Health is "ok" when an edge of the region serves and is not draining, "draining" when all its
	// edges are draining (clients should choose another region).
	Health string `json:"health"`
	Edges  int    `json:"edges"` // edges announced and not expired
}

// Summarize folds the edges of a Directory into one Status per region, by name. A region's URLs are
// those of its most recently announced serving edge (of any edge when all drain).
func Summarize(edges []Edge) []Status {
	by := map[string]*Status{}
	newest := map[string]time.Time{}
	var names []string
	for _, e := range edges {
		s := by[e.Region]
		if s == nil {
			s = &Status{Name: e.Region, Health: "draining"}
			by[e.Region] = s
			names = append(names, e.Region)
		}
		s.Edges++
		serving := !e.Draining
		if serving && s.Health != "ok" {
			s.Health, newest[e.Region] = "ok", time.Time{} // a serving edge's URLs win over draining ones
		}
		if (serving || s.Health != "ok") && !e.Expires.Before(newest[e.Region]) {
			s.URL, s.WebTransport, newest[e.Region] = e.URL, e.WebTransport, e.Expires
		}
	}
	slices.Sort(names)
	out := make([]Status, 0, len(names))
	for _, n := range names {
		out = append(out, *by[n])
	}
	return out
}
