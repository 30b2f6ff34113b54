package snapshot

import "time"

// SetRacyMargin lets a test trust cached hashes of files written moments before, instead of waiting for
// them to age past the margin.
func SetRacyMargin(s *Snapshotter, d time.Duration) { s.racy = d }

// SetRangeSize makes Restore fetch blobs of more than 2×n bytes in ranges of n, so a test needs no large files.
func SetRangeSize(s *Snapshotter, n int64) { s.rangeSize = n }

// Trusted exposes the racy-clean rule to tests.
func Trusted(mtime, ctime int64, hashedAt time.Time, margin time.Duration) bool {
	id := fileID{dev: 1, ino: 2, size: 3, mtime: mtime, ctime: ctime}
	return cached{id: id, hashedAt: hashedAt}.trusted(id, margin)
}

// ParseManifestName exposes the parser of listed manifest names to the fuzz test.
var ParseManifestName = parseManifestName

// ParsePointer exposes the parser of latest pointers to the fuzz test.
func ParsePointer(data []byte, prefix, region string) (epoch, seq int64, gotRegion string, err error) {
	p, err := parsePointer(data, prefix, region)
	return p.Epoch, p.Seq, p.Region, err
}

// ParseFence exposes the parser of the fence object to the fuzz test.
func ParseFence(data []byte) (int64, error) {
	f, err := parseFence(data)
	return f.Epoch, err
}

// Parallel exposes the worker pool to its test.
var Parallel = parallel
