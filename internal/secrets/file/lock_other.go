//go:build !unix

package file

// lockFile is a no-op where flock is unavailable: writes stay atomic (rename) but two processes changing the
// file at the same instant may lose one update.
func lockFile(string) (func(), error) { return func() {}, nil }
