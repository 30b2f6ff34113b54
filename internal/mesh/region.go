package mesh

import (
	"crypto/x509"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// ValidRegion reports whether name can be a region: 1 to 32 characters of [a-z0-9-], starting and ending
// with a letter or digit.
func ValidRegion(name string) bool {
	if name == "" || len(name) > maxRegionLen || name[0] == '-' || name[len(name)-1] == '-' {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// RegionURI is the URI SAN an edge certificate of region carries: urn:warren:region:<region>.
func RegionURI(region string) *url.URL {
	return &url.URL{Scheme: "urn", Opaque: "warren:region:" + region}
}

// RegionOf is the region a certificate names: it must carry exactly one URI SAN urn:warren:region:<name>
// with a valid name. The error wraps ErrUnknownRegion.
func RegionOf(cert *x509.Certificate) (string, error) {
	region := ""
	for _, u := range cert.URIs {
		s := u.String()
		if !strings.HasPrefix(s, regionURIPrefix) {
			continue
		}
		if region != "" {
			return "", fmt.Errorf("%w: the certificate names more than one region", ErrUnknownRegion)
		}
		region = strings.TrimPrefix(s, regionURIPrefix)
		if !ValidRegion(region) {
			return "", fmt.Errorf("%w: invalid region name %q", ErrUnknownRegion, truncate(region))
		}
	}
	if region == "" {
		return "", fmt.Errorf("%w: the certificate has no %s URI", ErrUnknownRegion, regionURIPrefix+"<name>")
	}
	return region, nil
}

// verifyPeer checks a peer's certificate chain as presented in a handshake: it must chain to roots for
// usage and name a region known says yes to, and that region must be want unless want is "". It answers the
// region. Errors wrap ErrUntrusted, ErrUnknownRegion or ErrRegionMismatch.
func verifyPeer(chain []*x509.Certificate, roots *x509.CertPool, usage x509.ExtKeyUsage, now time.Time,
	known func(string) bool, want string) (string, error) {
	if len(chain) == 0 {
		return "", fmt.Errorf("%w: no certificate", ErrUntrusted)
	}
	if len(chain) > maxPeerChain {
		return "", fmt.Errorf("%w: a chain of %d certificates, more than %d", ErrUntrusted, len(chain), maxPeerChain)
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	opts := x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}}
	if _, err := chain[0].Verify(opts); err != nil {
		return "", fmt.Errorf("%w: %v", ErrUntrusted, err)
	}
	region, err := RegionOf(chain[0])
	if err != nil {
		return "", err
	}
	if !known(region) {
		return "", fmt.Errorf("%w: %q", ErrUnknownRegion, region)
	}
	if want != "" && region != want {
		return region, fmt.Errorf("%w: dialed %q, the certificate names %q", ErrRegionMismatch, want, region)
	}
	return region, nil
}
