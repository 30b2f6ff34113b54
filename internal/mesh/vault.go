package mesh

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	vaultapi "github.com/hashicorp/vault/api"
)

// Defaults of VaultConfig.
const (
	DefaultPKIMount     = "pki"
	DefaultVaultTimeout = 10 * time.Second
	DefaultRetryMin     = time.Second
	DefaultRetryMax     = time.Minute
)

// VaultConfig says where a production edge gets its certificate: Vault's PKI secrets engine, which issues it
// at <Mount>/issue/<Role> with the URI SAN urn:warren:region:<Region>. The role must allow that URI
// (allowed_uri_sans "urn:warren:region:*"), not require a common name unless CommonName is set (require_cn
// false), and set both server_flag and client_flag (the default): edges are servers and clients of each
// other.
type VaultConfig struct {
	// Client talks to Vault with a token allowed to update <Mount>/issue/<Role>; the caller keeps it logged in.
	Client *vaultapi.Client
	Mount  string // DefaultPKIMount when empty
	Role   string // required
	Region string // required: the region the certificate names
	// CommonName is asked for when set (the role must allow it).
	CommonName string
	// TTL is the lifetime asked for; the role's default when zero.
	TTL time.Duration
	// Timeout bounds one request to Vault (DefaultVaultTimeout when zero).
	Timeout time.Duration
	// RetryMin and RetryMax bound the waits between failed renewals in Run (DefaultRetryMin, DefaultRetryMax
	// when zero), doubling.
	RetryMin, RetryMax time.Duration
	Logger             *slog.Logger // discards when nil
}

// VaultSource holds an edge certificate issued by Vault and renews it before it expires: Certificate is a
// Config.Certificate. Safe for concurrent use.
type VaultSource struct {
	cfg  VaultConfig
	path string
	log  *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	roots   *x509.CertPool
	renewAt time.Time
}

// NewVaultSource issues the first certificate, so an edge that cannot get one does not start.
func NewVaultSource(ctx context.Context, cfg VaultConfig) (*VaultSource, error) {
	cfg.Mount = strings.Trim(cmp.Or(cfg.Mount, DefaultPKIMount), "/")
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultVaultTimeout)
	cfg.RetryMin = cmp.Or(cfg.RetryMin, DefaultRetryMin)
	cfg.RetryMax = cmp.Or(cfg.RetryMax, DefaultRetryMax)
	switch {
	case cfg.Client == nil:
		return nil, fmt.Errorf("%w: no Vault client", ErrConfig)
	case cfg.Role == "" || strings.Contains(cfg.Role, "/"):
		return nil, fmt.Errorf("%w: PKI role %q", ErrConfig, cfg.Role)
	case !ValidRegion(cfg.Region):
		return nil, fmt.Errorf("%w: region %q", ErrConfig, truncate(cfg.Region))
	case cfg.TTL < 0 || cfg.Timeout < 0 || cfg.RetryMin <= 0 || cfg.RetryMax < cfg.RetryMin:
		return nil, fmt.Errorf("%w: negative TTL, timeout or retry bounds", ErrConfig)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	v := &VaultSource{cfg: cfg, path: cfg.Mount + "/issue/" + cfg.Role, log: cfg.Logger.With("region", cfg.Region)}
	if err := v.Renew(ctx); err != nil {
		return nil, err
	}
	return v, nil
}

// Certificate is the current certificate. It never waits for Vault.
func (v *VaultSource) Certificate() (*tls.Certificate, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.cert, nil
}

// Roots is a pool of the top of the chain Vault returned with the current certificate: the roots every edge
// of a mesh issued by this PKI mount can use.
func (v *VaultSource) Roots() *x509.CertPool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.roots
}

// RenewAt is when Run renews the current certificate: once two thirds of its lifetime have passed.
func (v *VaultSource) RenewAt() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.renewAt
}

// Renew issues a new certificate now; the current one stays in use if that fails.
func (v *VaultSource) Renew(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, v.cfg.Timeout)
	defer cancel()
	data := map[string]any{"uri_sans": RegionURI(v.cfg.Region).String(), "format": "pem"}
	if v.cfg.CommonName != "" {
		data["common_name"] = v.cfg.CommonName
	}
	if v.cfg.TTL > 0 {
		data["ttl"] = v.cfg.TTL.String()
	}
	issued := time.Now()
	sec, err := v.cfg.Client.Logical().WriteWithContext(ctx, v.path, data)
	if err != nil {
		return fmt.Errorf("issue mesh certificate at %s: %w", v.path, err)
	}
	if sec == nil || sec.Data == nil {
		return fmt.Errorf("issue mesh certificate at %s: empty answer", v.path)
	}
	cert, roots, err := parseIssued(sec.Data, v.cfg.Region)
	if err != nil {
		return fmt.Errorf("issue mesh certificate at %s: %w", v.path, err)
	}
	life := cert.Leaf.NotAfter.Sub(issued)
	v.mu.Lock()
	v.cert, v.roots, v.renewAt = cert, roots, issued.Add(life*2/3)
	v.mu.Unlock()
	v.log.Info("mesh certificate issued", "serial", cert.Leaf.SerialNumber.Text(16), "not_after", cert.Leaf.NotAfter)
	return nil
}

// Run renews the certificate at RenewAt until ctx ends, retrying a failed renewal with doubling waits (the
// current certificate stays in use meanwhile).
func (v *VaultSource) Run(ctx context.Context) {
	wait := v.cfg.RetryMin
	for {
		t := time.NewTimer(time.Until(v.RenewAt()))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		for {
			err := v.Renew(ctx)
			if err == nil {
				wait = v.cfg.RetryMin
				break
			}
			v.log.Error("mesh certificate renewal failed", "err", err, "retry_in", wait)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			wait = min(2*wait, v.cfg.RetryMax)
		}
	}
}

// parseIssued reads the answer of <mount>/issue/<role>: the leaf, which must name region, the chain up to
// but not including the root, the key, and the root as a pool.
func parseIssued(data map[string]any, region string) (*tls.Certificate, *x509.CertPool, error) {
	str := func(k string) string { s, _ := data[k].(string); return s }
	chain := []string{str("certificate")}
	if l, ok := data["ca_chain"].([]any); ok {
		for _, c := range l {
			if s, ok := c.(string); ok {
				chain = append(chain, s)
			}
		}
	} else if s := str("issuing_ca"); s != "" {
		chain = append(chain, s)
	}
	var certs []*x509.Certificate
	var pemChain []byte
	for _, s := range chain {
		for b, rest := pem.Decode([]byte(s)); b != nil; b, rest = pem.Decode(rest) {
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				return nil, nil, fmt.Errorf("a certificate in the answer: %w", err)
			}
			certs = append(certs, c)
			if c.CheckSignatureFrom(c) != nil || len(certs) == 1 { // not self-signed: sent to peers
				pemChain = append(pemChain, pem.EncodeToMemory(b)...)
			}
		}
	}
	if len(certs) < 2 {
		return nil, nil, errors.New("no certificate and issuing CA in the answer")
	}
	cert, err := tls.X509KeyPair(pemChain, []byte(str("private_key")))
	if err != nil {
		return nil, nil, err
	}
	if r, err := RegionOf(cert.Leaf); err != nil || r != region {
		return nil, nil, fmt.Errorf("the certificate names region %q, not %q (%v)", r, region, err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(certs[len(certs)-1])
	return &cert, roots, nil
}
