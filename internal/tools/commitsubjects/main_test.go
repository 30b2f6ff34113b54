package main

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		msg string
		ok  bool
	}{
		{"edge: an error precedes its closes\n", true},
		{"billing/cockroach: a refused call fails alone\n\nThe body.\n", true},
		{"edge, mesh: forwarded requests go on kept streams\n", true},
		{"README: 64 fuzz targets\n", true},
		{"docs/ARCHITECTURE.md: one table\n", true},
		{"runner: " + strings.Repeat("x", 64) + "\n", true}, // 72
		{"runner: " + strings.Repeat("é", 64) + "\n", true}, // 72 characters, more bytes
		{"runner: " + strings.Repeat("x", 65) + "\n", false},
		{"fix the runner\n", false},
		{"runner:no space\n", false},
		{": no area\n", false},
		{"runner: \n", false},
		{"edge,mesh: no space after the comma\n", false},
		{"edge: subject\nbody with no blank line\n", false},
		{"", false},
		{"\n\n", false},
	} {
		if err := check(tc.msg); (err == nil) != tc.ok {
			t.Errorf("check(%q) = %v, want ok %v", tc.msg, err, tc.ok)
		}
	}
}
