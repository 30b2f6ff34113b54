package vault

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
)

// adminKeyPrefix marks admin keys, as the file store's do.
const adminKeyPrefix = "wak_"

// maxAdminKeys bounds how many admin key versions AdminKeys reads: the current one and those replaced less
// than PreviousGrace ago, up to this many.
const maxAdminKeys = 4

// AdminKeys returns the billing API's admin keys, newest first: the current version of <prefix>/admin
// (field "key") and each older version until PreviousGrace after the version that replaced it was written.
// None is an empty list. The keys are bearer secrets: callers compare them in constant time and never log
// them.
func (s *Store) AdminKeys(ctx context.Context) ([]string, error) {
	if err := s.ready(ctx); err != nil {
		return nil, fmt.Errorf("admin keys: %w", err)
	}
	vals, err := s.liveValues(ctx, adminName, "key", s.need("read", adminName), maxAdminKeys)
	if err != nil {
		return nil, fmt.Errorf("admin keys: %w", err)
	}
	keys := make([]string, len(vals))
	for i, v := range vals {
		keys[i] = v.value
	}
	return keys, nil
}

// EnsureAdminKey returns the newest admin key, writing a random first one when there is none (created is
// then true). Two callers racing both get the one that was written.
func (s *Store) EnsureAdminKey(ctx context.Context) (key string, created bool, err error) {
	keys, err := s.AdminKeys(ctx)
	if err != nil {
		return "", false, fmt.Errorf("ensure admin key: %w", err)
	}
	if len(keys) > 0 {
		return keys[0], false, nil
	}
	b := make([]byte, MinSecretSize)
	if _, err := rand.Read(b); err != nil {
		return "", false, fmt.Errorf("generate admin key: %w", err)
	}
	key = adminKeyPrefix + base64.RawURLEncoding.EncodeToString(b)
	_, err = s.put(ctx, adminName, map[string]any{"key": key}, 0, s.need("create", adminName))
	if errors.Is(err, errCASMismatch) { // written meanwhile by another caller (or every version deleted)
		if keys, err = s.AdminKeys(ctx); err != nil {
			return "", false, fmt.Errorf("ensure admin key: %w", err)
		}
		if len(keys) == 0 {
			return "", false, fmt.Errorf("ensure admin key: %s exists but has no readable version", s.dataPath(adminName))
		}
		return keys[0], false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("ensure admin key: %w", err)
	}
	return key, true, nil
}

// ModelAPIKey returns the model provider's API key: the newest readable version of <prefix>/model, field
// "api_key". ErrNotFound when there is none.
func (s *Store) ModelAPIKey(ctx context.Context) (string, error) {
	if err := s.ready(ctx); err != nil {
		return "", fmt.Errorf("model api key: %w", err)
	}
	vals, err := s.liveValues(ctx, modelName, "api_key", s.need("read", modelName), 1)
	if err != nil {
		return "", fmt.Errorf("model api key: %w", err)
	}
	if len(vals) == 0 {
		return "", fmt.Errorf("model api key: %w: write it to %s (field api_key)", ErrNotFound, s.dataPath(modelName))
	}
	return vals[0].value, nil
}
