package main

import (
	"encoding/base64"
	"testing"
)

// warren pull's default branch comes from the token's subject, read without verification; anything that
// is not a three-part token with a subject gives "sandbox".
func TestTokenUser(t *testing.T) {
	seg := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for tok, want := range map[string]string{
		seg(`{"alg":"HS256"}`) + "." + seg(`{"iss":"dev","sub":"alice"}`) + ".sig": "alice",
		seg(`{}`) + "." + seg(`{"iss":"dev"}`) + ".sig":                            "sandbox",
		seg(`{}`) + "." + "!!!" + ".sig":                                           "sandbox",
		"not-a-token":                                                              "sandbox",
		"":                                                                         "sandbox",
	} {
		if got := tokenUser(tok); got != want {
			t.Errorf("tokenUser(%q) = %q, want %q", tok, got, want)
		}
	}
}
