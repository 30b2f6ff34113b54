// Package templates keeps workspace templates: the tree every new sandbox of an issuer starts from
// (docs/ARCHITECTURE.md#templates). A template is named by its issuer and a name ("default" unless the
// runner is told another); each deploy is an immutable version, a snapshot manifest (runner/snapshot) of
// the uploaded tree whose file contents are content-addressed blobs, so a file deployed twice is stored
// once. Layout in the blob store, under Prefix(issuer, name):
//
//	blobs/<sha256>                 file contents, shared by every version
//	manifests/<version>-1.json     one manifest per version
//	latest                         the current version (what new sandboxes get)
//
// Versions are numbered from 1 (a manifest's epoch); the current one is the newest. Using an older
// version again (a rollback) makes it the newest, as a new version naming the same blobs, so the latest
// pointer only ever moves forward, under the same compare-and-set fence as sandbox snapshots. A runner
// whose sandbox has no snapshot of its own restores its issuer's template before it serves anything
// (Restore); a sandbox that has one is never touched by a deploy.
package templates

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/internal/blob"
	"github.com/warren-mesh/warren/internal/token"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/snapshot"
)

// DefaultName is the template a runner restores when none is named.
const DefaultName = "default"

// maxNameLen bounds a template's name; maxIssuerLen an issuer id (as billing.MaxNameLen).
const (
	maxTemplateName = token.MaxTemplateLen
	maxIssuerLen    = 256
	// maxVersions bounds the versions List reads.
	maxVersions = 1000
)

// CheckName validates a template name: 1 to 64 bytes of [a-z0-9._-], starting with a letter or digit.
// Its wire code is invalid_argument.
func CheckName(name string) error {
	if !token.ValidTemplate(name) {
		return wire.Errorf(wire.InvalidArgument, "template name %q must be 1 to %d bytes of [a-z0-9._-], starting with a letter or digit", name, maxTemplateName)
	}
	return nil
}

// checkIssuer validates an issuer id as the path of an admin route carries it.
func checkIssuer(iss string) error {
	if iss == "" || len(iss) > maxIssuerLen || strings.ContainsAny(iss, "\x00/") {
		return wire.Errorf(wire.InvalidArgument, "issuer %q must be 1 to %d bytes without NUL or slash", iss, maxIssuerLen)
	}
	return nil
}

// Prefix is the blob-store prefix of an issuer's template: the issuer by a hash (issuer ids may hold any
// character; blob keys may not), then the name.
func Prefix(issuer, name string) string {
	h := sha256.Sum256([]byte(issuer))
	return "templates/" + hex.EncodeToString(h[:16]) + "/" + name
}

// Version is one deployed version of a template.
type Version struct {
	ID      string    `json:"version"`
	Time    time.Time `json:"time"`
	Files   int       `json:"files"`
	Bytes   int64     `json:"bytes"`
	Current bool      `json:"current"`
	// UploadedFiles and UploadedBytes are what a deploy sent to the store (contents not already there);
	// only in a deploy's answer.
	UploadedFiles int   `json:"uploaded_files,omitempty"`
	UploadedBytes int64 `json:"uploaded_bytes,omitempty"`
}

// versionID names the version of manifest epoch-seq: the epoch, with the seq when a concurrent deploy of
// the same number made one past 1.
func versionID(epoch, seq int64) string {
	if seq == 1 {
		return strconv.FormatInt(epoch, 10)
	}
	return fmt.Sprintf("%d.%d", epoch, seq)
}

func parseVersionID(id string) (epoch, seq int64, err error) {
	e, s, dotted := strings.Cut(id, ".")
	epoch, err1 := strconv.ParseInt(e, 10, 64)
	seq = 1
	var err2 error
	if dotted {
		seq, err2 = strconv.ParseInt(s, 10, 64)
	}
	if err1 != nil || err2 != nil || epoch < 1 || seq < 1 {
		return 0, 0, wire.Errorf(wire.InvalidArgument, "version %q is not a version id (a number, as `warren admin templates ls` lists)", id)
	}
	return epoch, seq, nil
}

// Config configures a Store.
type Config struct {
	// Blobs is the blob store templates are kept in: the snapshots' store of the region the admin API runs
	// in (required). Runners of other regions read it through their snapshot regions.
	Blobs blob.Store
	// Region is the region of Blobs when runners have other regions' stores (as snapshot.Config.Region);
	// "" in a single-region deployment.
	Region string
	// Limits bound one deploy's archive.
	Limits Limits
	// TempDir is where an upload is unpacked before it is stored (default os.TempDir()).
	TempDir string
	Logger  *slog.Logger
	// Metrics registers warren_template_deploys_total (nil: not registered).
	Metrics prometheus.Registerer
}

// Store deploys, lists, rolls back and deletes templates.
type Store struct {
	cfg     Config
	deploys *prometheus.CounterVec
	mu      sync.Mutex // one change at a time from this process (the fence handles the others)
}

// New validates cfg.
func New(cfg Config) (*Store, error) {
	if cfg.Blobs == nil {
		return nil, errors.New("templates: a blob store is required")
	}
	if cfg.TempDir == "" {
		cfg.TempDir = os.TempDir()
	}
	abs, err := filepath.Abs(cfg.TempDir)
	if err != nil {
		return nil, fmt.Errorf("templates: temp dir: %w", err)
	}
	cfg.TempDir = abs
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Limits = cfg.Limits.withDefaults()
	s := &Store{cfg: cfg, deploys: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "warren_template_deploys_total",
		Help: "Workspace template deploys by result: ok, refused (a bad or too large archive, a bad name) or error.",
	}, []string{"result"})}
	if cfg.Metrics != nil {
		if err := cfg.Metrics.Register(s.deploys); err != nil {
			return nil, fmt.Errorf("templates: metrics: %w", err)
		}
	}
	return s, nil
}

// snapshotter is a Snapshotter of the template's prefix with its one dir, "workspace", at dir.
func (s *Store) snapshotter(issuer, name, dir string) (*snapshot.Snapshotter, error) {
	return snapshot.New(snapshot.Config{Store: s.cfg.Blobs, Region: s.cfg.Region, Prefix: Prefix(issuer, name),
		Dirs: map[string]string{"workspace": dir}, Logger: s.cfg.Logger.With("component", "templates")})
}

func checkNames(issuer, name string) error {
	if err := checkIssuer(issuer); err != nil {
		return err
	}
	return CheckName(name)
}

// Deploy unpacks the tar stream r (checked as Unpack does, within the Store's Limits) and stores it as
// the template's new current version. A refused archive stores nothing.
func (s *Store) Deploy(ctx context.Context, issuer, name string, r io.Reader) (v Version, err error) {
	defer func() {
		result := "ok"
		switch c := wire.CodeOf(err); {
		case err == nil:
		case c == wire.InvalidArgument || c == wire.PayloadTooLarge:
			result = "refused"
		default:
			result = "error"
		}
		s.deploys.WithLabelValues(result).Inc()
	}()
	if err := checkNames(issuer, name); err != nil {
		return Version{}, err
	}
	tmp, err := os.MkdirTemp(s.cfg.TempDir, "warren-template-")
	if err != nil {
		return Version{}, fmt.Errorf("deploy: %w", err)
	}
	defer os.RemoveAll(tmp)
	tree := filepath.Join(tmp, "workspace")
	if err := os.Mkdir(tree, 0o700); err != nil {
		return Version{}, fmt.Errorf("deploy: %w", err)
	}
	files, size, err := Unpack(ctx, r, tree, s.cfg.Limits)
	if err != nil {
		return Version{}, fmt.Errorf("deploy template %s of %s: %w", name, issuer, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	snap, err := s.snapshotter(issuer, name, tree)
	if err != nil {
		return Version{}, err
	}
	next, err := s.nextVersion(ctx, snap)
	if err != nil {
		return Version{}, err
	}
	m, st, err := snap.Snapshot(ctx, next)
	if err != nil {
		return Version{}, fmt.Errorf("deploy template %s of %s: %w", name, issuer, err)
	}
	v = Version{ID: versionID(m.Epoch, m.Seq), Time: m.Time, Files: st.Files, Bytes: st.Bytes, Current: true,
		UploadedFiles: st.FilesUploaded, UploadedBytes: st.BytesUploaded}
	s.cfg.Logger.Info("template deployed", "issuer", issuer, "template", name, "version", v.ID, "files", files,
		"bytes", size, "uploaded_files", st.FilesUploaded, "uploaded_bytes", st.BytesUploaded)
	return v, nil
}

// nextVersion is the current version's number plus one (1 for the first).
func (s *Store) nextVersion(ctx context.Context, snap *snapshot.Snapshotter) (int64, error) {
	m, ok, err := snap.Latest(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the current version: %w", err)
	}
	if !ok {
		return 1, nil
	}
	return m.Epoch + 1, nil
}

// List returns the template's versions, newest first; wire not_found when it has none.
func (s *Store) List(ctx context.Context, issuer, name string) ([]Version, error) {
	if err := checkNames(issuer, name); err != nil {
		return nil, err
	}
	snap, err := s.snapshotter(issuer, name, s.cfg.TempDir)
	if err != nil {
		return nil, err
	}
	cur, ok, err := snap.Latest(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the current version: %w", err)
	}
	if !ok {
		return nil, wire.Errorf(wire.NotFound, "issuer %s has no template %q", issuer, name)
	}
	type id struct{ epoch, seq int64 }
	var ids []id
	prefix := Prefix(issuer, name) + "/manifests/"
	for o, err := range s.cfg.Blobs.List(ctx, prefix) {
		if err != nil {
			return nil, fmt.Errorf("list versions: %w", err)
		}
		e, sq, ok := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(o.Key, prefix), ".json"), "-")
		epoch, err1 := strconv.ParseInt(e, 10, 64)
		seq, err2 := strconv.ParseInt(sq, 10, 64)
		if ok && err1 == nil && err2 == nil {
			ids = append(ids, id{epoch, seq})
		}
	}
	slices.SortFunc(ids, func(a, b id) int {
		if a.epoch != b.epoch {
			return int(b.epoch - a.epoch)
		}
		return int(b.seq - a.seq)
	})
	if len(ids) > maxVersions {
		ids = ids[:maxVersions]
	}
	vs := make([]Version, 0, len(ids))
	for _, i := range ids {
		m, err := snap.ReadManifest(ctx, i.epoch, i.seq)
		if err != nil {
			return nil, fmt.Errorf("read version %s: %w", versionID(i.epoch, i.seq), err)
		}
		vs = append(vs, describe(m, m.Epoch == cur.Epoch && m.Seq == cur.Seq))
	}
	return vs, nil
}

func describe(m snapshot.Manifest, current bool) Version {
	v := Version{ID: versionID(m.Epoch, m.Seq), Time: m.Time, Current: current}
	for _, d := range m.Dirs {
		for _, e := range d.Entries {
			if e.Type == snapshot.TypeFile {
				v.Files++
				v.Bytes += e.Size
			}
		}
	}
	return v
}

// Use makes version id the current one again (a rollback), as a new version with its tree; the current
// version is answered as it is.
func (s *Store) Use(ctx context.Context, issuer, name, id string) (Version, error) {
	if err := checkNames(issuer, name); err != nil {
		return Version{}, err
	}
	epoch, seq, err := parseVersionID(id)
	if err != nil {
		return Version{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	snap, err := s.snapshotter(issuer, name, s.cfg.TempDir)
	if err != nil {
		return Version{}, err
	}
	m, err := snap.ReadManifest(ctx, epoch, seq)
	if errors.Is(err, blob.ErrNotFound) {
		return Version{}, wire.Errorf(wire.NotFound, "template %q of issuer %s has no version %s", name, issuer, id)
	}
	if err != nil {
		return Version{}, fmt.Errorf("read version %s: %w", id, err)
	}
	cur, ok, err := snap.Latest(ctx)
	if err != nil {
		return Version{}, fmt.Errorf("read the current version: %w", err)
	}
	if ok && cur.Epoch == epoch && cur.Seq == seq {
		return describe(m, true), nil
	}
	next, err := s.nextVersion(ctx, snap)
	if err != nil {
		return Version{}, err
	}
	nm, err := snap.Republish(ctx, m, next)
	if err != nil {
		return Version{}, fmt.Errorf("use version %s: %w", id, err)
	}
	s.cfg.Logger.Info("template version reused", "issuer", issuer, "template", name, "from", id, "version", versionID(nm.Epoch, nm.Seq))
	return describe(nm, true), nil
}

// Delete removes the template, every version and blob; wire not_found when there is nothing. Sandboxes
// that started from it keep their files.
func (s *Store) Delete(ctx context.Context, issuer, name string) error {
	if err := checkNames(issuer, name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	// The pointer first: once it is gone no runner starts from a half-deleted template.
	latest := Prefix(issuer, name) + "/latest"
	if _, err := s.cfg.Blobs.Stat(ctx, latest); err == nil {
		if err := s.cfg.Blobs.Delete(ctx, latest); err != nil {
			return fmt.Errorf("delete template: %w", err)
		}
		n++
	}
	for o, err := range s.cfg.Blobs.List(ctx, Prefix(issuer, name)+"/") {
		if err != nil {
			return fmt.Errorf("delete template: %w", err)
		}
		if err := s.cfg.Blobs.Delete(ctx, o.Key); err != nil {
			return fmt.Errorf("delete template: %w", err)
		}
		n++
	}
	if n == 0 {
		return wire.Errorf(wire.NotFound, "issuer %s has no template %q", issuer, name)
	}
	s.cfg.Logger.Info("template deleted", "issuer", issuer, "template", name, "objects", n)
	return nil
}

// RestoreConfig says which template a runner restores, from where, into which workspace.
type RestoreConfig struct {
	// Store, Region and Regions are the runner's snapshot stores (snapshot.Config's): the template is
	// read from whichever region holds its newest version.
	Store   blob.Store
	Region  string
	Regions map[string]blob.Store
	Issuer  string
	Name    string // default DefaultName
	// Workspace is the sandbox's workspace directory (absolute), empty: a new sandbox.
	Workspace string
	Logger    *slog.Logger
}

// Restore writes the template's current version into the workspace; false when the issuer has no such
// template (the sandbox then starts empty).
func Restore(ctx context.Context, cfg RestoreConfig) (string, snapshot.Stats, bool, error) {
	if cfg.Name == "" {
		cfg.Name = DefaultName
	}
	if err := checkNames(cfg.Issuer, cfg.Name); err != nil {
		return "", snapshot.Stats{}, false, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	snap, err := snapshot.New(snapshot.Config{Store: cfg.Store, Region: cfg.Region, Regions: cfg.Regions,
		Prefix: Prefix(cfg.Issuer, cfg.Name), Dirs: map[string]string{"workspace": cfg.Workspace}, Logger: cfg.Logger})
	if err != nil {
		return "", snapshot.Stats{}, false, err
	}
	m, ok, err := snap.Latest(ctx)
	if err != nil || !ok {
		return "", snapshot.Stats{}, false, err
	}
	st, err := snap.Restore(ctx, m)
	if err != nil {
		return "", st, false, err
	}
	return versionID(m.Epoch, m.Seq), st, true, nil
}
