package roles

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/warren-mesh/warren/edge"
)

// wtFlags configure the edge's WebTransport listener (docs/PROTOCOL.md#webtransport): a configured
// certificate, UDP at the -listen port, and the public URL announced in the region directory.
type wtFlags struct {
	cert, key, url string
}

func (f *wtFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.cert, "wt-cert", os.Getenv("WARREN_WT_CERT"), "PEM certificate chain of the WebTransport listener (HTTP/3 on UDP at the -listen port); re-read when the file changes. Empty: no WebTransport ($WARREN_WT_CERT)")
	fs.StringVar(&f.key, "wt-key", os.Getenv("WARREN_WT_KEY"), "PEM private key of -wt-cert ($WARREN_WT_KEY)")
	fs.StringVar(&f.url, "wt-url", os.Getenv("WARREN_WT_URL"), "this region's public WebTransport URL, https://host:port/wt, announced in GET /v1/regions; default https://<listen address>/wt ($WARREN_WT_URL)")
}

// open binds UDP at ln's address and returns the edge's WebTransport configuration with the socket; nil
// when -wt-cert is not set.
func (f *wtFlags) open(ln net.Listener, log *slog.Logger) (*edge.WebTransport, net.PacketConn, error) {
	if f.cert == "" && f.key == "" {
		return nil, nil, nil
	}
	if f.cert == "" || f.key == "" {
		return nil, nil, errors.New("-wt-cert and -wt-key go together")
	}
	files := &certFiles{cert: f.cert, key: f.key, log: log}
	if err := files.load(); err != nil {
		return nil, nil, fmt.Errorf("-wt-cert: %w", err)
	}
	tcp := ln.Addr().(*net.TCPAddr)
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: tcp.IP, Port: tcp.Port, Zone: tcp.Zone})
	if err != nil {
		return nil, nil, fmt.Errorf("webtransport: listen on UDP port %d: %w", tcp.Port, err)
	}
	u := f.url
	if u == "" {
		u = "https://" + reachableAddr(ln.Addr().String()) + "/wt"
	}
	return &edge.WebTransport{GetCertificate: files.GetCertificate, URL: u}, pc, nil
}

// certRecheck is how often certFiles looks whether its files changed.
const certRecheck = 30 * time.Second

// certFiles serves a certificate from PEM files, read again when their modification time changes (checked
// at most every certRecheck), so a renewed certificate is served without a restart. A file that fails to
// load keeps the last good certificate (and is logged).
type certFiles struct {
	cert, key string
	log       *slog.Logger
	now       func() time.Time // nil: time.Now

	mu      sync.Mutex
	cur     *tls.Certificate
	mod     time.Time // the newest modification time of the files loaded
	checked time.Time
}

func (c *certFiles) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}

// modTime is the newer of the two files' modification times.
func (c *certFiles) modTime() (time.Time, error) {
	a, err := os.Stat(c.cert)
	if err != nil {
		return time.Time{}, err
	}
	b, err := os.Stat(c.key)
	if err != nil {
		return time.Time{}, err
	}
	if b.ModTime().After(a.ModTime()) {
		return b.ModTime(), nil
	}
	return a.ModTime(), nil
}

// load reads the files. Callers hold mu, or own c.
func (c *certFiles) load() error {
	mod, err := c.modTime()
	if err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(c.cert, c.key)
	if err != nil {
		return err
	}
	c.cur, c.mod, c.checked = &cert, mod, c.clock()
	return nil
}

// GetCertificate is the listener's tls.Config.GetCertificate.
func (c *certFiles) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := c.clock(); now.Sub(c.checked) >= certRecheck {
		c.checked = now
		if mod, err := c.modTime(); err == nil && !mod.Equal(c.mod) {
			if err := c.load(); err != nil {
				c.log.Error("webtransport certificate not reloaded; serving the previous one", "cert", c.cert, "err", err)
			} else {
				c.log.Info("webtransport certificate reloaded", "cert", c.cert)
			}
		}
	}
	return c.cur, nil
}
