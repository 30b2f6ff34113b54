package edge

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"net"
	"sync"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
)

// CertificateHash is a certificate's hash as GET /v1/regions publishes it for serverCertificateHashes.
type CertificateHash = wire.CertificateHash

// HashOf is the sha-256 CertificateHash of a DER certificate.
func HashOf(der []byte) CertificateHash {
	h := sha256.Sum256(der)
	return CertificateHash{Algorithm: "sha-256", Value: base64.StdEncoding.EncodeToString(h[:])}
}

// MaxSelfSignedValidity is the longest validity a browser accepts of a certificate pinned by hash
// (serverCertificateHashes): two weeks.
const MaxSelfSignedValidity = 14 * 24 * time.Hour

// SelfSigned is a development WebTransport certificate: self-signed ECDSA P-256, valid for Validity from
// its creation, replaced by a fresh one (a new key too) once less than a third of its validity remains, so
// a browser that pinned the published hash always connects to a certificate valid for days yet. Clients
// learn the current hash from GET /v1/regions. Safe for concurrent use.
type SelfSigned struct {
	// Hosts are the DNS names and IP literals the certificate names (browsers need an IP literal URL for a
	// hash-pinned certificate; the name is not checked against a pinned hash).
	Hosts []string
	// Validity is each certificate's lifetime, at most MaxSelfSignedValidity (default 10 days).
	Validity time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time

	mu       sync.Mutex
	cert     *tls.Certificate
	hash     CertificateHash
	renewAt  time.Time
	notAfter time.Time
}

func (s *SelfSigned) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// current returns the certificate to serve at the clock's now, making a new one when it is due.
func (s *SelfSigned) current() (*tls.Certificate, CertificateHash, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.cert != nil && now.Before(s.renewAt) {
		return s.cert, s.hash, nil
	}
	validity := s.Validity
	if validity == 0 {
		validity = 10 * 24 * time.Hour
	}
	if validity < 0 || validity > MaxSelfSignedValidity {
		return nil, CertificateHash{}, fmt.Errorf("edge: self-signed certificate validity %v: at most %v", validity, MaxSelfSignedValidity)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, CertificateHash{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, CertificateHash{}, err
	}
	// Backdated a minute for clocks a little behind, within the validity browsers accept.
	notBefore := now.Add(-time.Minute)
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "warren dev edge"},
		NotBefore:             notBefore,
		NotAfter:              notBefore.Add(validity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	for _, h := range s.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, CertificateHash{}, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, CertificateHash{}, err
	}
	s.cert = &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
	s.hash = HashOf(der)
	s.notAfter = tmpl.NotAfter
	s.renewAt = notBefore.Add(validity - validity/3)
	return s.cert, s.hash, nil
}

// GetCertificate is the tls.Config.GetCertificate of the WebTransport listener.
func (s *SelfSigned) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c, _, err := s.current()
	return c, err
}

// Hashes are the hashes to publish: the certificate served now (made now if due).
func (s *SelfSigned) Hashes() []CertificateHash {
	_, h, err := s.current()
	if err != nil {
		return nil
	}
	return []CertificateHash{h}
}

// errNoCertificate: a WebTransport listener needs a certificate source.
var errNoCertificate = errors.New("edge: WebTransport needs a certificate (GetCertificate)")
