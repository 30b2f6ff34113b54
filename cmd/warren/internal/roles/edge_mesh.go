package roles

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"

	"github.com/warren-mesh/warren/cmd/warren/internal/env"
	"github.com/warren-mesh/warren/edge"
	"github.com/warren-mesh/warren/internal/mesh"
	"github.com/warren-mesh/warren/internal/secrets/vault"
)

// resetKeyEnv holds the mesh's stateless reset key when no file is named (a secret: never a flag value).
const resetKeyEnv = "WARREN_MESH_RESET_KEY"

// meshFlags configure the edge's mesh node (docs/ARCHITECTURE.md#regions): where it listens, the address it
// announces, where its certificate comes from (a dev CA directory, or Vault's PKI engine in production) and
// its stateless reset key.
type meshFlags struct {
	listen, addr, caDir, pkiMount, pkiRole, resetKeyFile string
}

func (m *meshFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&m.listen, "mesh-listen", os.Getenv("WARREN_MESH_LISTEN"), "UDP address of the edge-to-edge mesh (QUIC), e.g. :7443; empty: no mesh, and a user another region holds is refused naming that region ($WARREN_MESH_LISTEN)")
	fs.StringVar(&m.addr, "mesh-addr", os.Getenv("WARREN_MESH_ADDR"), "host:port other regions' edges reach this edge's mesh at, announced in the region directory; default: the -mesh-listen address, with this host's name when it names no host ($WARREN_MESH_ADDR)")
	fs.StringVar(&m.caDir, "mesh-ca-dir", os.Getenv("WARREN_MESH_CA_DIR"), "development only: directory of a dev CA (generated on first start, mode 0700) issuing the mesh certificates; every region's edges must share it ($WARREN_MESH_CA_DIR)")
	fs.StringVar(&m.pkiRole, "mesh-pki-role", os.Getenv("WARREN_MESH_PKI_ROLE"), "production: Vault PKI role issuing the mesh certificates with -vault's login (it must allow the URI SAN urn:warren:region:<region>) ($WARREN_MESH_PKI_ROLE)")
	fs.StringVar(&m.pkiMount, "mesh-pki-mount", env.Or("WARREN_MESH_PKI_MOUNT", mesh.DefaultPKIMount), "Vault PKI mount of -mesh-pki-role ($WARREN_MESH_PKI_MOUNT)")
	fs.StringVar(&m.resetKeyFile, "mesh-reset-key-file", os.Getenv("WARREN_MESH_RESET_KEY_FILE"), "file holding the mesh's stateless reset key, 64 hex digits, secret and the same across restarts (or $"+resetKeyEnv+"); none: peers notice a restarted edge only at their idle timeout ($WARREN_MESH_RESET_KEY_FILE)")
}

// certSource is where the mesh certificate comes from.
type certSource struct {
	cert  func() (*tls.Certificate, error)
	roots *x509.CertPool
	run   func(context.Context) // renews it until ctx ends; nil: nothing to renew
}

// source opens the certificate source the flags name: exactly one of -mesh-ca-dir and -mesh-pki-role.
func (m *meshFlags) source(ctx context.Context, region string, keys *vault.Store, log *slog.Logger) (certSource, error) {
	switch {
	case m.caDir != "" && m.pkiRole != "":
		return certSource{}, errors.New("-mesh-ca-dir and -mesh-pki-role: choose one")
	case m.caDir != "":
		ca, err := mesh.DevCA(m.caDir)
		if err != nil {
			return certSource{}, fmt.Errorf("-mesh-ca-dir: %w", err)
		}
		log.Warn("mesh certificates from a development CA", "dir", m.caDir)
		return certSource{cert: ca.Source(region), roots: ca.Roots()}, nil
	case m.pkiRole != "":
		vs, err := mesh.NewVaultSource(ctx, mesh.VaultConfig{Client: keys.Client(), Mount: m.pkiMount, Role: m.pkiRole, Region: region,
			Logger: log.With("component", "mesh-pki")})
		if err != nil {
			return certSource{}, fmt.Errorf("-mesh-pki-role: %w", err)
		}
		return certSource{cert: vs.Certificate, roots: vs.Roots(), run: vs.Run}, nil
	}
	return certSource{}, errors.New("-mesh-listen needs a certificate: -mesh-pki-role (Vault PKI) or, in development, -mesh-ca-dir")
}

// resetKey reads the stateless reset key from -mesh-reset-key-file or $WARREN_MESH_RESET_KEY (removed from
// the environment); nil when neither is set.
func (m *meshFlags) resetKey() (*quic.StatelessResetKey, error) {
	v, from := os.Getenv(resetKeyEnv), "$"+resetKeyEnv
	_ = os.Unsetenv(resetKeyEnv)
	if m.resetKeyFile != "" {
		b, err := os.ReadFile(m.resetKeyFile)
		if err != nil {
			return nil, fmt.Errorf("-mesh-reset-key-file: %w", err)
		}
		v, from = string(b), "-mesh-reset-key-file"
	}
	v = strings.TrimSpace(v)
	if v == "" {
		return nil, nil
	}
	b, err := hex.DecodeString(v)
	if err != nil || len(b) != len(quic.StatelessResetKey{}) {
		return nil, fmt.Errorf("%s: want %d hex digits", from, 2*len(quic.StatelessResetKey{}))
	}
	var k quic.StatelessResetKey
	copy(k[:], b)
	return &k, nil
}

// announced is the mesh address to announce: -mesh-addr, else the bound address with host when the
// listen address names no host (or an unspecified one).
func (m *meshFlags) announced(bound net.Addr, host string) (string, error) {
	if m.addr != "" {
		if _, _, err := net.SplitHostPort(m.addr); err != nil {
			return "", fmt.Errorf("-mesh-addr %q: %w", m.addr, err)
		}
		return m.addr, nil
	}
	h, _, err := net.SplitHostPort(m.listen)
	if err != nil {
		return "", fmt.Errorf("-mesh-listen %q: %w", m.listen, err)
	}
	_, port, err := net.SplitHostPort(bound.String())
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(h); h == "" || (ip != nil && ip.IsUnspecified()) {
		h = host
	}
	return net.JoinHostPort(h, port), nil
}

// edgeMesh is an edge's mesh node, created before the edge (which consumes it) and served after.
type edgeMesh struct {
	node *mesh.Node
	src  certSource
	ed   *edge.Edge // set before listen: the node's Handler and KnownRegions call it
}

// newEdgeMesh makes the node the flags describe; nil when -mesh-listen is empty.
func (m *meshFlags) newEdgeMesh(ctx context.Context, region string, keys *vault.Store, log *slog.Logger, reg prometheus.Registerer) (*edgeMesh, error) {
	if m.listen == "" {
		if m.caDir != "" || m.pkiRole != "" || m.addr != "" {
			return nil, errors.New("-mesh-ca-dir, -mesh-pki-role and -mesh-addr need -mesh-listen")
		}
		return nil, nil
	}
	key, err := m.resetKey()
	if err != nil {
		return nil, err
	}
	src, err := m.source(ctx, region, keys, log)
	if err != nil {
		return nil, err
	}
	em := &edgeMesh{src: src}
	em.node, err = mesh.New(mesh.Config{
		Region: region, Certificate: src.cert, Roots: src.roots,
		KnownRegions:      func(r string) bool { return em.ed.KnownRegion(r) },
		Handler:           func(ctx context.Context, from string, s *mesh.Stream) { em.ed.ServeMesh(ctx, from, s) },
		StatelessResetKey: key, Logger: log.With("component", "mesh"), Metrics: reg,
	})
	if err != nil {
		return nil, err
	}
	return em, nil
}

// serve starts renewing the certificate and listening, until ctx ends, for ed; it answers the bound address.
func (em *edgeMesh) serve(ctx context.Context, ed *edge.Edge, listen string) (net.Addr, error) {
	em.ed = ed
	if em.src.run != nil {
		go em.src.run(ctx)
	}
	addr, err := em.node.Listen(ctx, listen)
	if err != nil {
		return nil, fmt.Errorf("-mesh-listen: %w", err)
	}
	return addr, nil
}
