package session

import (
	"crypto/rand"
	"fmt"
)

// ValidID reports whether id is an acceptable client-chosen session id: 1 to 64 of [A-Za-z0-9-].
func ValidID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c == '-' || c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z') {
			return false
		}
	}
	return true
}

// NewID returns a random id in UUID version 4 format.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails on Linux
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
