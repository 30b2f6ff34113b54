package vault

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// kvVersion is one version of a KV v2 secret as its metadata describes it.
type kvVersion struct {
	n         int
	created   time.Time
	deleted   time.Time // zero unless deleted (or scheduled for deletion, when in the future)
	destroyed bool
}

// kvMetadata is what IssuerKeys and the writers need of a secret's metadata.
type kvMetadata struct {
	current  int         // the newest version number, deleted or not: the check-and-set value
	versions []kvVersion // newest first
}

// maxVersion bounds version numbers read from Vault, so arithmetic on them cannot overflow.
const maxVersion = 1 << 40

// parseMetadata reads the data of a KV v2 metadata answer (GET <mount>/metadata/<path>). The answer comes
// from the network, so it checks every type instead of trusting the shape.
func parseMetadata(data map[string]any) (kvMetadata, error) {
	var md kvMetadata
	cur, err := intField(data["current_version"])
	if err != nil {
		return md, fmt.Errorf("metadata current_version: %w", err)
	}
	md.current = cur
	raw, ok := data["versions"].(map[string]any)
	if !ok {
		return md, errors.New("metadata has no versions map")
	}
	for key, v := range raw {
		n, err := strconv.Atoi(key)
		if err != nil || n <= 0 || n > maxVersion || strconv.Itoa(n) != key {
			return md, fmt.Errorf("metadata version %q is not a version number", key)
		}
		m, ok := v.(map[string]any)
		if !ok {
			return md, fmt.Errorf("metadata version %d is not an object", n)
		}
		kv := kvVersion{n: n}
		if kv.created, err = timeField(m["created_time"]); err != nil {
			return md, fmt.Errorf("metadata version %d created_time: %w", n, err)
		}
		if kv.created.IsZero() {
			return md, fmt.Errorf("metadata version %d has no created_time", n)
		}
		if kv.deleted, err = timeField(m["deletion_time"]); err != nil {
			return md, fmt.Errorf("metadata version %d deletion_time: %w", n, err)
		}
		switch d := m["destroyed"].(type) {
		case bool:
			kv.destroyed = d
		case nil:
		default:
			return md, fmt.Errorf("metadata version %d destroyed is %T", n, d)
		}
		md.versions = append(md.versions, kv)
	}
	slices.SortFunc(md.versions, func(a, b kvVersion) int { return b.n - a.n })
	if len(md.versions) > 0 && md.versions[0].n > md.current {
		return md, fmt.Errorf("metadata lists version %d above current_version %d", md.versions[0].n, md.current)
	}
	return md, nil
}

// intField reads a JSON number (json.Number when decoded with UseNumber, as the Vault client does).
func intField(v any) (int, error) {
	var n int64
	var err error
	switch x := v.(type) {
	case json.Number:
		n, err = x.Int64()
	case float64:
		if x != float64(int64(x)) {
			return 0, fmt.Errorf("%v is not an integer", x)
		}
		n = int64(x)
	default:
		return 0, fmt.Errorf("%T is not a number", v)
	}
	if err != nil {
		return 0, err
	}
	if n < 0 || n > maxVersion {
		return 0, fmt.Errorf("%d out of range", n)
	}
	return int(n), nil
}

// timeField reads an RFC 3339 time; empty or absent is the zero time.
func timeField(v any) (time.Time, error) {
	switch x := v.(type) {
	case nil:
		return time.Time{}, nil
	case string:
		if x == "" {
			return time.Time{}, nil
		}
		return time.Parse(time.RFC3339Nano, x)
	default:
		return time.Time{}, fmt.Errorf("%T is not a time", v)
	}
}

// live reports whether version v may still be read at now: not destroyed, and not deleted (a deletion time
// in the future is one scheduled by delete_version_after).
func (v kvVersion) live(now time.Time) bool {
	return !v.destroyed && (v.deleted.IsZero() || now.Before(v.deleted))
}

// stringField reads field from the data of a KV v2 read answer (GET <mount>/data/<path>): the secret's own
// key-value map is under "data", and is null when the version is deleted or destroyed (found is then
// false).
func stringField(data map[string]any, field string) (value string, found bool, err error) {
	inner, present := data["data"]
	if !present {
		return "", false, errors.New("answer has no data")
	}
	if inner == nil {
		return "", false, nil
	}
	m, ok := inner.(map[string]any)
	if !ok {
		return "", false, fmt.Errorf("data is %T, not an object", inner)
	}
	s, ok := m[field].(string)
	if !ok || s == "" {
		return "", false, fmt.Errorf("%w: field %q missing, empty or not a string", ErrMalformed, field)
	}
	return s, true, nil
}

// versionValue is one readable version's field.
type versionValue struct {
	version int
	value   string
}

// readMetadata reads a secret's metadata; found is false when Vault has none.
func (s *Store) readMetadata(ctx context.Context, rel, need string) (md kvMetadata, found bool, err error) {
	p := s.metadataPath(rel)
	sec, err := s.client.Logical().ReadWithContext(ctx, p)
	if err != nil {
		return md, false, classify("read "+p, need, err)
	}
	if sec == nil || sec.Data == nil {
		return md, false, nil
	}
	md, err = parseMetadata(sec.Data)
	if err != nil {
		return md, false, fmt.Errorf("read %s: %w: %w", p, ErrMalformed, err)
	}
	return md, true, nil
}

// readVersion reads field of one version; found is false when that version is deleted, destroyed or gone.
func (s *Store) readVersion(ctx context.Context, rel string, version int, field, need string) (string, bool, error) {
	p := s.dataPath(rel)
	sec, err := s.client.Logical().ReadWithDataWithContext(ctx, p, map[string][]string{"version": {strconv.Itoa(version)}})
	if err != nil {
		return "", false, classify("read "+p, need, err)
	}
	if sec == nil || sec.Data == nil {
		return "", false, nil
	}
	v, found, err := stringField(sec.Data, field)
	if err != nil {
		return "", false, fmt.Errorf("read %s version %d: %w", p, version, err)
	}
	return v, found, nil
}

// liveValues returns field of the secret's valid versions, newest first, at most max: the newest readable
// version, then each older readable one while the version after it is younger than PreviousGrace (a key
// stays valid for PreviousGrace after the one that replaced it was written). Deleted and destroyed versions
// are skipped. None when the secret does not exist or has no readable version.
func (s *Store) liveValues(ctx context.Context, rel, field, need string, max int) ([]versionValue, error) {
	md, found, err := s.readMetadata(ctx, rel, need)
	if err != nil || !found {
		return nil, err
	}
	now := s.now()
	var out []versionValue
	var newerCreated time.Time
	for _, v := range md.versions {
		if len(out) == max || (len(out) > 0 && !now.Before(newerCreated.Add(s.cfg.PreviousGrace))) {
			break
		}
		if !v.live(now) {
			continue
		}
		value, found, err := s.readVersion(ctx, rel, v.n, field, need)
		if err != nil {
			return nil, err
		}
		if !found { // deleted since the metadata was read
			continue
		}
		out = append(out, versionValue{version: v.n, value: value})
		newerCreated = v.created
	}
	return out, nil
}

// put writes a new version of rel with check-and-set cas (0: only if the secret does not exist) and returns
// its version number. A lost check-and-set is errCASMismatch.
func (s *Store) put(ctx context.Context, rel string, data map[string]any, cas int, need string) (int, error) {
	p := s.dataPath(rel)
	sec, err := s.client.Logical().WriteWithContext(ctx, p, map[string]any{
		"options": map[string]any{"cas": cas},
		"data":    data,
	})
	if err != nil {
		return 0, classify("write "+p, need, err)
	}
	if sec == nil || sec.Data == nil {
		return 0, fmt.Errorf("write %s: vault answered without version metadata", p)
	}
	v, err := intField(sec.Data["version"])
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("write %s: answer version: %v", p, err)
	}
	return v, nil
}
