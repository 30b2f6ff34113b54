package admintest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/warren-mesh/warren/billing"
)

// testAPIKeys holds a store to billing.APIKeys: a key needs a registered issuer and a free id, is listed
// only under its issuer, is found by id with its hash, and once revoked (by its own issuer only) is gone.
func testAPIKeys(t *testing.T, s Store) {
	ctx := context.Background()
	created := time.Unix(1_800_000_000, 0).UTC()
	newKey := func(iss, name string) (billing.APIKey, string) {
		t.Helper()
		id, secret, err := billing.NewAPIKeySecret()
		if err != nil {
			t.Fatal(err)
		}
		return billing.APIKey{ID: id, Issuer: iss, Name: name, Created: created}, secret
	}
	k1, secret1 := newKey("acme", "ci")
	if err := s.CreateAPIKey(ctx, k1, billing.HashAPIKeySecret(secret1)); !errors.Is(err, billing.ErrNotFound) {
		t.Fatalf("CreateAPIKey of an unregistered issuer: %v, want ErrNotFound", err)
	}
	MustPutIssuer(t, s, "acme", "")
	MustPutIssuer(t, s, "beta", "")
	if err := s.CreateAPIKey(ctx, k1, billing.HashAPIKeySecret(secret1)); err != nil {
		t.Fatal(err)
	}
	dup := k1
	dup.Issuer = "beta"
	if err := s.CreateAPIKey(ctx, dup, []byte("x")); !errors.Is(err, billing.ErrConflict) {
		t.Fatalf("CreateAPIKey with a taken id: %v, want ErrConflict", err)
	}
	k2, secret2 := newKey("acme", "backend")
	kb, secretB := newKey("beta", "")
	for _, c := range []struct {
		k      billing.APIKey
		secret string
	}{{k2, secret2}, {kb, secretB}} {
		if err := s.CreateAPIKey(ctx, c.k, billing.HashAPIKeySecret(c.secret)); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []billing.APIKey{
		{ID: "ak0", Issuer: "acme", Created: created},
		{ID: k1.ID[:17] + "g", Issuer: "acme", Created: created},
		{ID: "ak0000000000000001", Issuer: "", Created: created},
		{ID: "ak0000000000000002", Issuer: "acme", Name: "a\x00b", Created: created},
	} {
		if err := s.CreateAPIKey(ctx, bad, []byte("x")); !errors.Is(err, billing.ErrInvalid) {
			t.Errorf("CreateAPIKey(%+v) = %v, want ErrInvalid", bad, err)
		}
	}

	list, err := s.ListAPIKeys(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	want := []billing.APIKey{k1, k2}
	if k2.ID < k1.ID {
		want = []billing.APIKey{k2, k1}
	}
	if len(list) != 2 || list[0] != want[0] || list[1] != want[1] {
		t.Fatalf("ListAPIKeys(acme) = %+v, want %+v", list, want)
	}
	if list, err := s.ListAPIKeys(ctx, "nobody"); err != nil || list == nil || len(list) != 0 {
		t.Fatalf("ListAPIKeys of an issuer without keys = %#v, %v; want an empty list", list, err)
	}

	got, hash, err := s.LookupAPIKey(ctx, k1.ID)
	if err != nil || got != k1 || !bytes.Equal(hash, billing.HashAPIKeySecret(secret1)) {
		t.Fatalf("LookupAPIKey = %+v, %x, %v; want %+v and its hash", got, hash, err, k1)
	}

	// Another issuer cannot revoke acme's key, even knowing its id.
	if err := s.RevokeAPIKey(ctx, "beta", k1.ID); !errors.Is(err, billing.ErrNotFound) {
		t.Fatalf("RevokeAPIKey of another issuer's key: %v, want ErrNotFound", err)
	}
	if err := s.RevokeAPIKey(ctx, "acme", k1.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.LookupAPIKey(ctx, k1.ID); !errors.Is(err, billing.ErrNotFound) {
		t.Fatalf("LookupAPIKey of a revoked key: %v, want ErrNotFound", err)
	}
	if err := s.RevokeAPIKey(ctx, "acme", k1.ID); !errors.Is(err, billing.ErrNotFound) {
		t.Fatalf("RevokeAPIKey twice: %v, want ErrNotFound", err)
	}
	if list, err := s.ListAPIKeys(ctx, "acme"); err != nil || len(list) != 1 || list[0] != k2 {
		t.Fatalf("ListAPIKeys after the revocation = %+v, %v; want only %+v", list, err, k2)
	}
	if err := s.RevokeAPIKey(ctx, "acme", "not-an-id"); !errors.Is(err, billing.ErrInvalid) {
		t.Fatalf("RevokeAPIKey of a malformed id: %v, want ErrInvalid", err)
	}
}

// testIssuerDisabled: an issuer is registered enabled, disabled and enabled again, keeping its name, quota
// and creation time; a rename keeps it disabled; an unregistered issuer is ErrNotFound.
func testIssuerDisabled(t *testing.T, s Store) {
	ctx := context.Background()
	if _, err := s.SetIssuerDisabled(ctx, "acme", true); !errors.Is(err, billing.ErrNotFound) {
		t.Fatalf("SetIssuerDisabled of an unregistered issuer: %v, want ErrNotFound", err)
	}
	if _, err := s.SetIssuerDisabled(ctx, "", true); !errors.Is(err, billing.ErrInvalid) {
		t.Fatalf("SetIssuerDisabled of a bad id: %v, want ErrInvalid", err)
	}
	acme := MustPutIssuer(t, s, "acme", "Acme")
	MustPutIssuer(t, s, "beta", "")
	q := MustPutQuota(t, s, billing.QuotaKey{Issuer: "acme"}, Quota(5), 0)
	if acme.Disabled {
		t.Fatalf("a new issuer is disabled: %+v", acme)
	}
	got, err := s.SetIssuerDisabled(ctx, "acme", true)
	if err != nil || !got.Disabled || got.Name != "Acme" || !got.Created.Equal(acme.Created) || got.Quota == nil || *got.Quota != q {
		t.Fatalf("SetIssuerDisabled(acme, true) = %+v, %v", got, err)
	}
	if renamed := MustPutIssuer(t, s, "acme", "Acme Corp"); !renamed.Disabled {
		t.Fatalf("a rename enabled the issuer: %+v", renamed)
	}
	list, err := s.ListIssuers(ctx)
	if err != nil || len(list) != 2 || !list[0].Disabled || list[1].Disabled {
		t.Fatalf("ListIssuers = %+v, %v; want acme disabled, beta not", list, err)
	}
	if got, err := s.SetIssuerDisabled(ctx, "acme", false); err != nil || got.Disabled {
		t.Fatalf("SetIssuerDisabled(acme, false) = %+v, %v", got, err)
	}
}
