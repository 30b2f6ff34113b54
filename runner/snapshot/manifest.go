package snapshot

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/warren-mesh/warren/internal/regions"
)

// ManifestVersion is the only manifest format this package reads and writes. A format change that an
// older runner could misread gets a new version, and older runners refuse it.
const ManifestVersion = 1

// Limits on what a manifest may hold; anything beyond is ErrCorrupt.
const (
	// MaxManifestSize bounds the manifest object (about a million entries).
	MaxManifestSize = 256 << 20
	// MaxPathLen bounds an entry's path and a symlink's target (PATH_MAX on Linux).
	MaxPathLen = 4096
	// maxNameLen bounds one path element (NAME_MAX on Linux).
	maxNameLen = 255
	// maxDirNameLen bounds a Dir's name.
	maxDirNameLen = 64
)

// EntryType is the kind of a manifest entry.
type EntryType string

// Entry types. Sockets, FIFOs and devices are not snapshotted.
const (
	TypeFile    EntryType = "file"
	TypeDir     EntryType = "dir"
	TypeSymlink EntryType = "symlink"
)

// Manifest describes one snapshot: for each snapshotted directory, every entry below it. File contents
// are blobs named by their SHA-256 under <prefix>/blobs/. The manifest is stored as JSON at
// <prefix>/manifests/<epoch>-<seq>.json and never rewritten.
type Manifest struct {
	Version int   `json:"version"`
	Epoch   int64 `json:"epoch"`
	// Seq numbers the snapshots of one epoch from 1.
	Seq  int64     `json:"seq"`
	Time time.Time `json:"time"`
	// Region names the region whose store holds the manifest and every blob it names: the region of the
	// runner that wrote it (docs/ARCHITECTURE.md#regions). Empty in a single-region deployment, and in
	// manifests written before regions: Latest then sets it to the region of the store it was read from.
	// Otherwise 1 to 32 of [a-z0-9-], not starting or ending with '-'.
	Region string `json:"region,omitempty"`
	// Dirs are sorted by name, with unique names.
	Dirs []Dir `json:"dirs"`
}

// Dir is one snapshotted directory, such as "workspace" or "home".
type Dir struct {
	// Name is the key of Config.Dirs: 1 to 64 bytes of [A-Za-z0-9._-], not "." or "..".
	Name string `json:"name"`
	// Entries are sorted by path, so a directory comes before everything in it. The directory itself is
	// not an entry.
	Entries []Entry `json:"entries"`
}

// Entry is a file, directory or symbolic link.
type Entry struct {
	// Path is slash-separated and relative to the Dir: no leading slash, no "." or ".." or empty
	// elements, no NUL, valid UTF-8. Its parent is the Dir itself or a TypeDir entry.
	Path string    `json:"path"`
	Type EntryType `json:"type"`
	// Mode holds the permission bits (0o777) of files and directories; set-id and sticky bits are not
	// kept. Zero for symlinks.
	Mode fs.FileMode `json:"mode,omitempty"`
	// Size, SHA256 (lowercase hex) and MTime (Unix nanoseconds) describe a file's content.
	Size   int64  `json:"size,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	MTime  int64  `json:"mtime,omitempty"`
	// Target is a symlink's target, kept verbatim: it may be absolute or lead outside the Dir, because a
	// restored symlink is never followed by Restore.
	Target string `json:"target,omitempty"`
}

// ParseManifest decodes and validates a manifest read from object storage, which is untrusted: any
// malformed, unknown-version or unsafe manifest is ErrCorrupt.
func ParseManifest(data []byte) (Manifest, error) {
	if len(data) > MaxManifestSize {
		return Manifest{}, fmt.Errorf("%w: manifest is %d bytes, the limit is %d", ErrCorrupt, len(data), MaxManifestSize)
	}
	if !utf8.Valid(data) {
		// encoding/json would silently turn invalid bytes in names into U+FFFD.
		return Manifest{}, fmt.Errorf("%w: manifest is not valid UTF-8", ErrCorrupt)
	}
	var v struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return Manifest{}, fmt.Errorf("%w: manifest: %w", ErrCorrupt, err)
	}
	if v.Version == nil {
		return Manifest{}, fmt.Errorf("%w: manifest has no version", ErrCorrupt)
	}
	if *v.Version != ManifestVersion {
		return Manifest{}, fmt.Errorf("%w: manifest version %d, this runner reads %d", ErrCorrupt, *v.Version, ManifestVersion)
	}
	var m Manifest
	if err := decodeStrict(data, &m); err != nil {
		return Manifest{}, fmt.Errorf("%w: manifest: %w", ErrCorrupt, err)
	}
	if err := m.validate(); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// decodeStrict decodes exactly one JSON value with no unknown fields and nothing after it.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the JSON value")
	}
	return nil
}

// Marshal validates the manifest and encodes it as ParseManifest reads it. A manifest too large for
// ParseManifest is an error, so no snapshot is ever committed that could not be restored.
//
// The encoding is encoding/json's (HTML characters not escaped) byte for byte, written by hand: a
// snapshot of every turn encodes every entry of the tree, and reflection made that as costly as the
// walk of the tree itself (FuzzParseManifest compares the two encodings).
func (m Manifest) Marshal() ([]byte, error) {
	if err := m.validate(); err != nil {
		return nil, err
	}
	buf, err := m.appendJSON(make([]byte, 0, m.sizeHint()))
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	if len(buf) > MaxManifestSize {
		return nil, fmt.Errorf("manifest is %d bytes, the limit is %d: exclude large trees (Config.Exclude)", len(buf), MaxManifestSize)
	}
	return buf, nil
}

// sizeHint estimates the encoded size, so the buffer grows at most once or twice.
func (m *Manifest) sizeHint() int {
	n := 256
	for _, d := range m.Dirs {
		n += 64 + len(d.Entries)*160
	}
	return min(n, MaxManifestSize+1)
}

// appendJSON appends m as encoding/json's Encoder with SetEscapeHTML(false) writes it, newline included.
func (m *Manifest) appendJSON(b []byte) ([]byte, error) {
	t, err := m.Time.MarshalJSON()
	if err != nil {
		return nil, err
	}
	b = strconv.AppendInt(append(b, `{"version":`...), int64(m.Version), 10)
	b = strconv.AppendInt(append(b, `,"epoch":`...), m.Epoch, 10)
	b = strconv.AppendInt(append(b, `,"seq":`...), m.Seq, 10)
	b = append(append(b, `,"time":`...), t...)
	if m.Region != "" {
		b = appendJSONString(append(b, `,"region":`...), m.Region)
	}
	b = append(b, `,"dirs":`...)
	if m.Dirs == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, d := range m.Dirs {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(append(b, `{"name":`...), d.Name)
			b = append(b, `,"entries":`...)
			if d.Entries == nil {
				b = append(b, "null}"...)
				continue
			}
			b = append(b, '[')
			for k := range d.Entries {
				if k > 0 {
					b = append(b, ',')
				}
				b = d.Entries[k].appendJSON(b)
			}
			b = append(b, "]}"...)
		}
		b = append(b, ']')
	}
	return append(b, "}\n"...), nil
}

// appendJSON appends e as encoding/json writes it, leaving out the fields that are empty.
func (e *Entry) appendJSON(b []byte) []byte {
	b = appendJSONString(append(b, `{"path":`...), e.Path)
	b = appendJSONString(append(b, `,"type":`...), string(e.Type))
	if e.Mode != 0 {
		b = strconv.AppendUint(append(b, `,"mode":`...), uint64(e.Mode), 10)
	}
	if e.Size != 0 {
		b = strconv.AppendInt(append(b, `,"size":`...), e.Size, 10)
	}
	if e.SHA256 != "" {
		b = appendJSONString(append(b, `,"sha256":`...), e.SHA256)
	}
	if e.MTime != 0 {
		b = strconv.AppendInt(append(b, `,"mtime":`...), e.MTime, 10)
	}
	if e.Target != "" {
		b = appendJSONString(append(b, `,"target":`...), e.Target)
	}
	return append(b, '}')
}

// appendJSONString appends s quoted as encoding/json (without HTML escaping) quotes it: printable ASCII
// other than a quote or a backslash as it is, anything else through encoding/json itself.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			enc.Encode(s) // a string always encodes
			return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// validate checks everything Restore relies on: a known version, unique and well-formed names, paths
// that stay inside their directory, and parents that are directories of the manifest, so that no entry
// is ever written through a symlink or a file.
func (m *Manifest) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: manifest %d-%d: %s", ErrCorrupt, m.Epoch, m.Seq, fmt.Sprintf(format, args...))
	}
	if m.Version != ManifestVersion {
		return bad("version %d, want %d", m.Version, ManifestVersion)
	}
	if m.Epoch < 0 || m.Seq < 1 {
		return bad("epoch must be >= 0 and seq >= 1")
	}
	if m.Region != "" && !regions.ValidRegion(m.Region) {
		return bad("region %q is not 1 to 32 of [a-z0-9-]", m.Region)
	}
	names := make(map[string]bool, len(m.Dirs))
	for _, d := range m.Dirs {
		if err := checkDirName(d.Name); err != nil {
			return bad("%v", err)
		}
		if names[d.Name] {
			return bad("dir %q appears twice", d.Name)
		}
		names[d.Name] = true
		types := make(map[string]EntryType, len(d.Entries))
		for _, e := range d.Entries {
			if err := checkPath(e.Path); err != nil {
				return bad("dir %q: %v", d.Name, err)
			}
			if _, dup := types[e.Path]; dup {
				return bad("dir %q: %q appears twice", d.Name, e.Path)
			}
			types[e.Path] = e.Type
			if err := e.check(); err != nil {
				return bad("dir %q: %q: %v", d.Name, e.Path, err)
			}
		}
		for _, e := range d.Entries {
			if parent := path.Dir(e.Path); parent != "." && types[parent] != TypeDir {
				return bad("dir %q: the parent of %q is not a directory of the manifest", d.Name, e.Path)
			}
		}
	}
	return nil
}

func (e *Entry) check() error {
	switch e.Type {
	case TypeFile:
		if e.Size < 0 || !isSHA256(e.SHA256) || e.Target != "" {
			return errors.New("a file needs a size >= 0, a lowercase hex sha256 and no target")
		}
	case TypeDir:
		if e.Size != 0 || e.SHA256 != "" || e.Target != "" || e.MTime != 0 {
			return errors.New("a directory has only a mode")
		}
	case TypeSymlink:
		if e.Mode != 0 || e.Size != 0 || e.SHA256 != "" || e.MTime != 0 {
			return errors.New("a symlink has only a target")
		}
		if e.Target == "" || len(e.Target) > MaxPathLen || strings.IndexByte(e.Target, 0) >= 0 ||
			!utf8.ValidString(e.Target) {
			return errors.New("a symlink target must be 1 to 4096 bytes of UTF-8 without NUL")
		}
	default:
		return fmt.Errorf("unknown type %q", e.Type)
	}
	if e.Mode&^fs.ModePerm != 0 {
		return fmt.Errorf("mode %#o has bits other than the permissions", uint32(e.Mode))
	}
	return nil
}

// checkPath validates an entry path like a sandbox path: relative, clean, inside its directory.
func checkPath(p string) error {
	switch {
	case p == "" || p == ".":
		return errors.New("empty path")
	case len(p) > MaxPathLen:
		return fmt.Errorf("path is longer than %d bytes", MaxPathLen)
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("path %q contains NUL", p)
	case !utf8.ValidString(p):
		return fmt.Errorf("path %q is not valid UTF-8", p)
	case p[0] == '/':
		return fmt.Errorf("path %q is absolute", p)
	case path.Clean(p) != p:
		return fmt.Errorf("path %q is not clean", p)
	}
	for elem := range strings.SplitSeq(p, "/") {
		if elem == ".." {
			return fmt.Errorf("path %q leaves its directory", p)
		}
		if len(elem) > maxNameLen {
			return fmt.Errorf("path %q has an element longer than %d bytes", p, maxNameLen)
		}
	}
	return nil
}

func checkDirName(name string) error {
	if name == "" || len(name) > maxDirNameLen || name == "." || name == ".." {
		return fmt.Errorf("dir name %q must be 1 to %d bytes, not \".\" or \"..\"", name, maxDirNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' ||
			c == '-') {
			return fmt.Errorf("dir name %q has a byte outside [A-Za-z0-9._-]", name)
		}
	}
	return nil
}

func isSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// pointer is the content of <prefix>/latest in one region's store: which manifest of that store is the
// region's latest snapshot. It changes only by a compare-and-set (blob.Store.PutIf) that refuses to go
// back to an older epoch.
type pointer struct {
	Epoch    int64     `json:"epoch"`
	Seq      int64     `json:"seq"`
	Manifest string    `json:"manifest"`
	Time     time.Time `json:"time"`
	// Region is the region of the store holding the pointer and its manifest, as Manifest.Region.
	Region string `json:"region,omitempty"`

	size int // bytes of the object it was read from (0 when not read)
}

// maxPointerSize bounds the latest pointer: a short prefix-relative key, two numbers, a time, a region.
const maxPointerSize = 4 << 10

// parsePointer decodes the latest pointer read from the store of region, which must name the manifest
// key its epoch and seq imply and, if it names a region, that one.
func parsePointer(data []byte, prefix, region string) (pointer, error) {
	if len(data) > maxPointerSize {
		return pointer{}, fmt.Errorf("%w: latest pointer is %d bytes, the limit is %d", ErrCorrupt, len(data), maxPointerSize)
	}
	var p pointer
	if err := decodeStrict(data, &p); err != nil {
		return pointer{}, fmt.Errorf("%w: latest pointer: %w", ErrCorrupt, err)
	}
	if p.Epoch < 0 || p.Seq < 1 || p.Manifest != manifestKey(prefix, p.Epoch, p.Seq) {
		return pointer{}, fmt.Errorf("%w: latest pointer %d-%d names manifest %q", ErrCorrupt, p.Epoch, p.Seq, p.Manifest)
	}
	if p.Region != "" && (!regions.ValidRegion(p.Region) || p.Region != region) {
		return pointer{}, fmt.Errorf("%w: latest pointer in the store of region %q says region %q", ErrCorrupt, region, p.Region)
	}
	p.size = len(data)
	return p, nil
}

func manifestKey(prefix string, epoch, seq int64) string {
	return fmt.Sprintf("%s/manifests/%d-%d.json", prefix, epoch, seq)
}

func blobKey(prefix, sha string) string { return prefix + "/blobs/" + sha }

func latestKey(prefix string) string { return prefix + "/latest" }
