package mesh

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Lifetimes of what DevCA issues.
const (
	DevCALifetime   = 10 * 365 * 24 * time.Hour
	DevLeafLifetime = 30 * 24 * time.Hour
)

// CA is a development certificate authority kept in a directory (DevCA): it issues each region's edge
// certificate. Production edges get theirs from Vault (VaultSource) instead. Safe for concurrent use, and
// several processes may share its directory.
type CA struct {
	dir      string
	cert     *x509.Certificate
	key      crypto.Signer
	now      func() time.Time
	leafLife time.Duration

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// DevCA opens the development CA in dir, generating it on first use: dir (mode 0700) holds ca.crt and
// ca.key, and <region>.crt and <region>.key for each region's leaf, all mode 0600. A dir that others may
// read is refused.
func DevCA(dir string) (*CA, error) { return openDevCA(dir, time.Now, DevLeafLifetime) }

func openDevCA(dir string, now func() time.Time, leafLife time.Duration) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("dev CA: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("dev CA: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("dev CA: %s is mode %v, want 0700: the CA key must be private", dir, fi.Mode().Perm())
	}
	ca := &CA{dir: dir, now: now, leafLife: leafLife, leaves: map[string]*tls.Certificate{}}
	err = ca.locked(func() error {
		kc, err := loadPair(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"))
		if err == nil {
			ca.cert, ca.key = kc.Leaf, kc.PrivateKey.(crypto.Signer)
			return nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return ca.generate()
	})
	if err != nil {
		return nil, fmt.Errorf("dev CA in %s: %w", dir, err)
	}
	return ca, nil
}

// Roots is a pool holding the CA's certificate, the Roots of every dev edge's Config.
func (ca *CA) Roots() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// Source is a Config.Certificate for region's edge.
func (ca *CA) Source(region string) func() (*tls.Certificate, error) {
	return func() (*tls.Certificate, error) { return ca.Leaf(region) }
}

// Leaf is region's edge certificate: the one in the directory while it has more than a third of its
// lifetime left, a new one otherwise (written back for the next start).
func (ca *CA) Leaf(region string) (*tls.Certificate, error) {
	if !ValidRegion(region) {
		return nil, fmt.Errorf("dev CA: invalid region %q", truncate(region))
	}
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c := ca.leaves[region]; c != nil && ca.fresh(c.Leaf) {
		return c, nil
	}
	var leaf *tls.Certificate
	err := ca.locked(func() error {
		crt, key := filepath.Join(ca.dir, region+".crt"), filepath.Join(ca.dir, region+".key")
		c, err := loadPair(crt, key)
		if err == nil && ca.fresh(c.Leaf) && c.Leaf.CheckSignatureFrom(ca.cert) == nil {
			leaf = c
			return nil
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		leaf, err = ca.issue(region, crt, key)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dev CA leaf for %s: %w", region, err)
	}
	ca.leaves[region] = leaf
	return leaf, nil
}

// fresh reports whether a leaf has more than a third of its lifetime left.
func (ca *CA) fresh(c *x509.Certificate) bool {
	left := c.NotAfter.Sub(ca.now())
	return left > c.NotAfter.Sub(c.NotBefore)/3
}

// locked runs f holding an exclusive lock on the directory, so that processes sharing it do not issue over
// each other.
func (ca *CA) locked(f func() error) error {
	lf, err := os.OpenFile(filepath.Join(ca.dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", ca.dir, err)
	}
	return f()
}

func (ca *CA) generate() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := ca.now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "Warren mesh dev CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(DevCALifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return err
	}
	if err := writePair(filepath.Join(ca.dir, "ca.crt"), filepath.Join(ca.dir, "ca.key"), der, key); err != nil {
		return err
	}
	ca.cert, _ = x509.ParseCertificate(der)
	ca.key = key
	return nil
}

func (ca *CA) issue(region, crtPath, keyPath string) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := ca.now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "warren edge " + region},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(ca.leafLife),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{RegionURI(region)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, err
	}
	if err := writePair(crtPath, keyPath, der, key); err != nil {
		return nil, err
	}
	return loadPair(crtPath, keyPath)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

// writePair writes a certificate and its key, each atomically (temporary file, fsync, rename), mode 0600.
func writePair(crtPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb})); err != nil {
		return err
	}
	return writeFile(crtPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func writeFile(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// loadPair reads a PEM certificate and key; the error wraps os.ErrNotExist when either file is missing.
func loadPair(crtPath, keyPath string) (*tls.Certificate, error) {
	c, err := tls.LoadX509KeyPair(crtPath, keyPath)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("load %s: %w", crtPath, err)
	}
	if _, ok := c.PrivateKey.(crypto.Signer); !ok {
		return nil, fmt.Errorf("load %s: the key cannot sign", keyPath)
	}
	return &c, nil
}
