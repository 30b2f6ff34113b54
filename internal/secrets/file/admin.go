package file

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/warren-mesh/warren/internal/secrets"
)

// adminKeyPrefix marks admin keys, so one pasted in the wrong place (or leaked in a log) is recognisable.
const adminKeyPrefix = "wak_"

// storedAdminKey is one admin key of the billing API; the list is kept newest first.
type storedAdminKey struct {
	ID      string    `json:"id"`
	Version int       `json:"version"`
	Key     string    `json:"key"`
	Created time.Time `json:"created"`
}

// AdminKeys returns the billing API's admin keys, newest first, reloading the file first if it changed on
// disk; none is an empty list. A file that cannot be read is secrets.ErrUnavailable. The keys are bearer
// secrets: callers compare them in constant time and never log them.
func (s *Store) AdminKeys(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.reloadLocked(false); err != nil {
		return nil, fmt.Errorf("%w: %w", secrets.ErrUnavailable, err)
	}
	keys := make([]string, len(s.doc.AdminKeys))
	for i, k := range s.doc.AdminKeys {
		keys[i] = k.Key
	}
	return keys, nil
}

// EnsureAdminKey returns the newest admin key, creating the first when there is none (created is then
// true). `warren dev` calls it at start, so `warren admin` finds a key in the data directory.
func (s *Store) EnsureAdminKey() (key string, created bool, err error) {
	err = s.updateDoc(func(d *document) (bool, error) {
		if len(d.AdminKeys) > 0 {
			key = d.AdminKeys[0].Key
			return false, nil
		}
		b := make([]byte, secretSize)
		if _, err := rand.Read(b); err != nil {
			return false, fmt.Errorf("generate admin key: %w", err)
		}
		key, created = adminKeyPrefix+base64.RawURLEncoding.EncodeToString(b), true
		d.AdminKeys = []storedAdminKey{{ID: "admin-v1", Version: 1, Key: key, Created: s.now().UTC().Truncate(time.Second)}}
		return true, nil
	})
	if err != nil {
		return "", false, fmt.Errorf("ensure admin key: %w", err)
	}
	return key, created, nil
}

// checkAdminKeys is parse's check of the admin keys: it orders them newest first (as issuer keys, a
// hand-edited file may list them in any order) and refuses missing or duplicate ids and versions and empty
// keys.
func checkAdminKeys(keys []storedAdminKey) error {
	slices.SortStableFunc(keys, func(a, b storedAdminKey) int { return b.Version - a.Version })
	ids := map[string]bool{}
	for i, k := range keys {
		switch {
		case k.ID == "" || ids[k.ID]:
			return errors.New("admin keys: missing or duplicate id")
		case k.Key == "":
			return fmt.Errorf("admin key %q: empty key", k.ID)
		case i > 0 && k.Version == keys[i-1].Version:
			return errors.New("admin keys: duplicate version")
		}
		ids[k.ID] = true
	}
	return nil
}
