// Package file is the file-backed Secrets store of `warren dev`: issuer HMAC keys, and the billing API's admin
// keys, in one JSON file (mode 0600) in the data directory. Every version of an issuer's key is kept;
// IssuerKeys lists them newest first. Writes replace the file atomically under an advisory lock, and readers
// reload it when it changes on disk, so a `warren token` in another process and the dev server agree on the
// keys.
package file

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/warren-mesh/warren/internal/secrets"
)

// DefaultFileName is the secrets file's name inside the data directory.
const DefaultFileName = "secrets.json"

// secretSize is the length of a generated admin key's random part: 256 bits.
const secretSize = 32

const formatVersion = 1

// document is the file's JSON form. AdminKeys is omitted while empty, so a file without admin keys reads
// exactly as before they existed.
type document struct {
	Version   int                    `json:"version"`
	Issuers   map[string][]storedKey `json:"issuers"`
	AdminKeys []storedAdminKey       `json:"admin_keys,omitempty"`
}

// storedKey is one key version; an issuer's list is kept newest first. Secret is the issuer secret as
// handed out (secrets.KeyFromStored tells the forms apart): a text secret "wsk_..." (every key written now),
// or standard base64 of a legacy key's bytes.
type storedKey struct {
	ID      string    `json:"id"`
	Version int       `json:"version"`
	Secret  string    `json:"secret"`
	Created time.Time `json:"created"`
}

// Store is a secrets.Store over one JSON file. Safe for concurrent use.
type Store struct {
	path string
	now  func() time.Time

	mu     sync.Mutex
	doc    document
	loaded os.FileInfo // the file as last read; nil when it did not exist
}

var _ secrets.Store = (*Store)(nil)

// Open reads the store at path. A missing file is an empty store; it is created by the first write.
func Open(path string) (*Store, error) {
	s := &Store{path: path, now: time.Now, doc: emptyDocument()}
	if err := s.reloadLocked(true); err != nil {
		return nil, err
	}
	return s, nil
}

// Path is the file the store reads and writes.
func (s *Store) Path() string { return s.path }

// IssuerKeys returns the issuer's keys newest first, reloading the file first if it changed on disk. A file
// that cannot be read is secrets.ErrUnavailable.
func (s *Store) IssuerKeys(ctx context.Context, issuer string) ([]secrets.Key, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.reloadLocked(false); err != nil {
		return nil, fmt.Errorf("%w: %w", secrets.ErrUnavailable, err)
	}
	stored := s.doc.Issuers[issuer]
	if len(stored) == 0 {
		return nil, fmt.Errorf("issuer %q: %w", issuer, secrets.ErrUnknownIssuer)
	}
	keys := make([]secrets.Key, 0, len(stored))
	for _, k := range stored {
		key, err := k.key()
		if err != nil { // checked at load; only a bug gets here
			return nil, fmt.Errorf("%w: %w", secrets.ErrUnavailable, err)
		}
		keys = append(keys, key)
	}
	return keys, nil
}

// CreateIssuer creates issuer with a random first key "<issuer>-v1". ErrIssuerExists if it has keys already.
func (s *Store) CreateIssuer(issuer string) (secrets.Key, error) {
	var key secrets.Key
	err := s.update(issuer, func(d *document) (bool, error) {
		if len(d.Issuers[issuer]) > 0 {
			return false, fmt.Errorf("create issuer %q: %w", issuer, ErrIssuerExists)
		}
		var err error
		key, err = s.addVersion(d, issuer)
		return true, err
	})
	return key, err
}

// Rotate adds key version N+1 to issuer and returns it; it becomes current and the former current key the
// previous one. secrets.ErrUnknownIssuer if the issuer has no keys.
func (s *Store) Rotate(issuer string) (secrets.Key, error) {
	var key secrets.Key
	err := s.update(issuer, func(d *document) (bool, error) {
		if len(d.Issuers[issuer]) == 0 {
			return false, fmt.Errorf("rotate issuer %q: %w", issuer, secrets.ErrUnknownIssuer)
		}
		var err error
		key, err = s.addVersion(d, issuer)
		return true, err
	})
	return key, err
}

// EnsureIssuer returns issuer's current key, creating the issuer first when it has none (created is then
// true). `warren dev` calls it for the dev issuer at start.
func (s *Store) EnsureIssuer(issuer string) (key secrets.Key, created bool, err error) {
	err = s.update(issuer, func(d *document) (bool, error) {
		if cur := d.Issuers[issuer]; len(cur) > 0 {
			var err error
			key, err = cur[0].key()
			return false, err
		}
		created = true
		var err error
		key, err = s.addVersion(d, issuer)
		return true, err
	})
	if err != nil {
		return secrets.Key{}, false, err
	}
	return key, created, nil
}

// update runs fn on the freshest document under the process mutex and the file lock, then writes the file
// if fn succeeded and reports a change.
func (s *Store) update(issuer string, fn func(*document) (changed bool, err error)) error {
	if !secrets.ValidIssuer(issuer) {
		return fmt.Errorf("issuer %q: %w", issuer, ErrInvalidIssuer)
	}
	return s.updateDoc(fn)
}

// updateDoc is update for changes that are not an issuer's.
func (s *Store) updateDoc(fn func(*document) (changed bool, err error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(s.path), 0o700); err != nil {
		return fmt.Errorf("create secrets dir: %w", err)
	}
	unlock, err := lockFile(s.path + ".lock")
	if err != nil {
		return err
	}
	defer unlock()
	if err := s.reloadLocked(true); err != nil {
		return err
	}
	d := s.doc.clone()
	changed, err := fn(&d)
	if err != nil || !changed {
		return err
	}
	if err := s.writeLocked(d); err != nil {
		return err
	}
	s.doc = d
	return nil
}

// addVersion prepends a new random text secret to issuer's list.
func (s *Store) addVersion(d *document, issuer string) (secrets.Key, error) {
	version := 1
	if cur := d.Issuers[issuer]; len(cur) > 0 {
		version = cur[0].Version + 1
	}
	key, err := secrets.NewTextKey(fmt.Sprintf("%s-v%d", issuer, version))
	if err != nil {
		return secrets.Key{}, err
	}
	k := storedKey{ID: key.ID, Version: version, Secret: key.Given(), Created: s.now().UTC().Truncate(time.Second)}
	d.Issuers[issuer] = append([]storedKey{k}, d.Issuers[issuer]...)
	return key, nil
}

// reloadLocked reads the file when force is set or when it differs from what was loaded (another file was
// renamed over it, or it was modified in place). A missing file is an empty store.
func (s *Store) reloadLocked(force bool) error {
	f, err := os.Open(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		s.doc, s.loaded = emptyDocument(), nil
		return nil
	}
	if err != nil {
		return fmt.Errorf("open secrets file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat secrets file: %w", err)
	}
	if !force && s.loaded != nil && sameVersion(s.loaded, fi) {
		return nil
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return fmt.Errorf("read secrets file: %w", err)
	}
	d, err := parse(data)
	if err != nil {
		return fmt.Errorf("%s: %w", s.path, err)
	}
	s.doc, s.loaded = d, fi
	return nil
}

// writeLocked replaces the file with d: a 0600 temp file in the same directory, fsynced, renamed over the
// old one, and the directory fsynced so the rename survives a crash.
func (s *Store) writeLocked(d document) error {
	data, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return fmt.Errorf("encode secrets: %w", err)
	}
	data = append(data, '\n')
	dir := filepath.Dir(s.path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(s.path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write secrets: %w", err)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("write secrets: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write secrets: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync secrets: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write secrets: %w", err)
	}
	if err := os.Rename(tmp.Name(), s.path); err != nil {
		return fmt.Errorf("replace secrets file: %w", err)
	}
	if dirf, err := os.Open(dir); err == nil {
		_ = dirf.Sync() // best effort: not every platform syncs directories
		dirf.Close()
	}
	fi, err := os.Stat(s.path)
	if err != nil {
		return fmt.Errorf("stat secrets file: %w", err)
	}
	s.loaded = fi
	return nil
}

// sameVersion reports whether two stats describe the same file contents as far as metadata can tell. Every
// write renames a new file into place, so the identity check catches writes within one mtime tick.
func sameVersion(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.ModTime().Equal(b.ModTime()) && a.Size() == b.Size()
}

// parse decodes and checks a secrets file.
func parse(data []byte) (document, error) {
	var d document
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return document{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if d.Version != formatVersion {
		return document{}, fmt.Errorf("%w: format version %d, want %d", ErrCorrupt, d.Version, formatVersion)
	}
	if d.Issuers == nil {
		d.Issuers = map[string][]storedKey{}
	}
	for iss, keys := range d.Issuers {
		if !secrets.ValidIssuer(iss) {
			return document{}, fmt.Errorf("%w: issuer %q: %w", ErrCorrupt, iss, ErrInvalidIssuer)
		}
		slices.SortStableFunc(keys, func(a, b storedKey) int { return b.Version - a.Version })
		seen := map[string]bool{}
		for i, k := range keys {
			if k.ID == "" || seen[k.ID] || (i > 0 && k.Version == keys[i-1].Version) {
				return document{}, fmt.Errorf("%w: issuer %q: missing or duplicate key id or version", ErrCorrupt, iss)
			}
			seen[k.ID] = true
			if _, err := k.key(); err != nil {
				return document{}, fmt.Errorf("%w: issuer %q key %q: %w", ErrCorrupt, iss, k.ID, err)
			}
		}
	}
	if err := checkAdminKeys(d.AdminKeys); err != nil {
		return document{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return d, nil
}

// key is the stored key as the verifier uses it. Legacy keys of any length are kept as they were accepted
// before text secrets; text secrets are checked in full.
func (k storedKey) key() (secrets.Key, error) { return secrets.KeyFromStored(k.ID, k.Secret, 1) }

func emptyDocument() document {
	return document{Version: formatVersion, Issuers: map[string][]storedKey{}}
}

func (d document) clone() document {
	c := document{Version: d.Version, Issuers: make(map[string][]storedKey, len(d.Issuers)), AdminKeys: slices.Clone(d.AdminKeys)}
	for iss, keys := range d.Issuers {
		c.Issuers[iss] = slices.Clone(keys)
	}
	return c
}
