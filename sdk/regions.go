package warren

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
)

// Region is one region as an edge lists it (GET /v1/regions).
type Region struct {
	Name         string `json:"name"`
	URL          string `json:"url"`
	WebTransport string `json:"webtransport,omitempty"`
	// CertificateHashes pin a development edge's self-signed WebTransport certificate (listed for the
	// answering edge's own region only).
	CertificateHashes []CertificateHash `json:"certificateHashes,omitempty"`
	// Health is "ok", or "draining" when the region is leaving: clients should choose another.
	Health string `json:"health"`
	Edges  int    `json:"edges"`
}

// CertificateHash is a WebTransport certificate's hash as GET /v1/regions publishes it, the shape of a
// browser's serverCertificateHashes entries: {"algorithm": "sha-256", "value": base64}.
type CertificateHash = wire.CertificateHash

// Regions is the answer of GET /v1/regions.
type Regions struct {
	Region  string   `json:"region"` // the region of the edge that answered
	Regions []Region `json:"regions"`
}

// Bounds of a regions answer: it comes from the network and is not trusted.
const (
	maxRegionsBody = 256 << 10
	maxRegions     = 256
)

// Regions lists the regions the edge knows, with their public URLs and health.
func (c *Client) Regions(ctx context.Context) (Regions, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.endpoint("/v1/regions", nil), nil)
	if err != nil {
		return Regions{}, err
	}
	resp, err := c.do(req)
	if err != nil {
		return Regions{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxRegionsBody+1))
	if err != nil {
		return Regions{}, fmt.Errorf("warren: read regions: %w", err)
	}
	return ParseRegions(b)
}

// ParseRegions reads a GET /v1/regions answer, keeping only the regions whose URL is an absolute
// http(s) or ws(s) URL; an answer over 256 KiB or with more than 256 regions is an error.
func ParseRegions(b []byte) (Regions, error) {
	if len(b) > maxRegionsBody {
		return Regions{}, fmt.Errorf("warren: regions answer over %d bytes", maxRegionsBody)
	}
	var r Regions
	d := json.NewDecoder(bytes.NewReader(b))
	if err := d.Decode(&r); err != nil {
		return Regions{}, fmt.Errorf("warren: decode regions: %w", err)
	}
	if len(r.Regions) > maxRegions {
		return Regions{}, fmt.Errorf("warren: %d regions listed, at most %d", len(r.Regions), maxRegions)
	}
	r.Regions = slices.DeleteFunc(r.Regions, func(g Region) bool {
		u, err := url.Parse(g.URL)
		return err != nil || g.Name == "" || u.Host == "" ||
			(u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "ws" && u.Scheme != "wss")
	})
	return r, nil
}

// Probe is what measuring one region's edge found.
type Probe struct {
	Region Region
	RTTs   []time.Duration // one per answered probe, in order
	Err    error           // the last failure, when no probe was answered
}

// Median is the median of the probe's round trips (0 when none was answered).
func (p Probe) Median() time.Duration {
	if len(p.RTTs) == 0 {
		return 0
	}
	s := slices.Clone(p.RTTs)
	slices.Sort(s)
	return s[len(s)/2]
}

// ProbeRegions measures each region's edge with n round trips (GET /healthz, on a connection set up by
// a first, unmeasured request), in parallel across regions and bounded by ctx. hc nil: a client with a
// 5 s timeout.
func ProbeRegions(ctx context.Context, hc *http.Client, regions []Region, n int) []Probe {
	if hc == nil {
		hc = &http.Client{Timeout: 5 * time.Second}
	}
	n = max(n, 1)
	out := make([]Probe, len(regions))
	done := make(chan struct{})
	for i, r := range regions {
		go func() {
			defer func() { done <- struct{}{} }()
			out[i] = probe(ctx, hc, r, n)
		}()
	}
	for range regions {
		<-done
	}
	return out
}

func probe(ctx context.Context, hc *http.Client, r Region, n int) Probe {
	p := Probe{Region: r}
	u, err := url.Parse(r.URL)
	if err != nil {
		p.Err = err
		return p
	}
	switch u.Scheme {
	case "ws":
		u.Scheme = "http"
	case "wss":
		u.Scheme = "https"
	}
	u.Path = u.Path + "/healthz"
	get := func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("warren: probe %s: status %d", r.Name, resp.StatusCode)
		}
		return nil
	}
	if err := get(); err != nil { // sets up the connection (DNS, TCP, TLS): not what the region costs later
		p.Err = err
		return p
	}
	for range n {
		start := time.Now()
		if err := get(); err != nil {
			p.Err = err
			continue
		}
		p.RTTs = append(p.RTTs, time.Since(start))
	}
	if len(p.RTTs) > 0 {
		p.Err = nil
	}
	return p
}

// Hysteresis keeps a client on its region unless another is clearly better: by more than Margin and
// below Ratio of the current one's round trip. The zero value uses 10 ms and 2/3.
type Hysteresis struct {
	Margin time.Duration
	Ratio  float64
}

// Choose picks a region from probes: a healthy region ("ok") that answered, the fastest by median round
// trip, unless current (a region name, "" for none) is healthy, answered, and the fastest is not clearly
// better than it (see Hysteresis). A draining current region is always left. It returns "" when no
// region qualifies.
func (h Hysteresis) Choose(current string, probes []Probe) string {
	margin, ratio := h.Margin, h.Ratio
	if margin <= 0 {
		margin = 10 * time.Millisecond
	}
	if ratio <= 0 || ratio >= 1 {
		ratio = 2.0 / 3
	}
	var best, cur *Probe
	for i := range probes {
		p := &probes[i]
		if p.Region.Health != "ok" || len(p.RTTs) == 0 {
			continue
		}
		if p.Region.Name == current {
			cur = p
		}
		if best == nil || p.Median() < best.Median() {
			best = p
		}
	}
	switch {
	case best == nil:
		return ""
	case cur == nil:
		return best.Region.Name
	}
	b, c := best.Median(), cur.Median()
	if c-b > margin && float64(b) < ratio*float64(c) {
		return best.Region.Name
	}
	return current
}

// Nearest asks the edge at seedURL for the regions, probes each region's edge n times and returns a
// Client for the nearest healthy one (with the same token and options), with the probes it measured. A
// seed reached over TLS only leads to regions reached over TLS. An explicit choice of edge is New: use
// Nearest only to let the SDK choose.
func Nearest(ctx context.Context, seedURL, token string, n int, opts ...Option) (*Client, []Probe, error) {
	seed, err := New(seedURL, token, opts...)
	if err != nil {
		return nil, nil, err
	}
	rs, err := seed.Regions(ctx)
	if err != nil {
		return nil, nil, err
	}
	if seed.base.Scheme == "https" {
		// The token goes to the chosen region: never over plain text when the seed was reached over TLS.
		rs.Regions = slices.DeleteFunc(rs.Regions, func(r Region) bool {
			u, err := url.Parse(r.URL)
			return err != nil || (u.Scheme != "https" && u.Scheme != "wss")
		})
	}
	probes := ProbeRegions(ctx, seed.hc, rs.Regions, n)
	name := Hysteresis{}.Choose("", probes)
	if name == "" {
		return nil, probes, fmt.Errorf("warren: no healthy region answered (%d listed)", len(rs.Regions))
	}
	i := slices.IndexFunc(probes, func(p Probe) bool { return p.Region.Name == name })
	c, err := New(probes[i].Region.URL, token, opts...)
	return c, probes, err
}
