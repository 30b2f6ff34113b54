package warren_test

import (
	"testing"

	warren "github.com/warren-mesh/warren/sdk"
)

// A bad edge URL is the SDK's typed error, invalid_argument, like every other error it returns.
func TestNewRefusesBadURLsWithInvalidArgument(t *testing.T) {
	for _, u := range []string{"", "not a url", "file:///etc/passwd", "http://", "http://[::1", "ftp://edge.example"} {
		if _, err := warren.New(u, "token"); !warren.IsCode(err, warren.CodeInvalidArgument) {
			t.Errorf("New(%q): %v, want an *Error with code invalid_argument", u, err)
		}
	}
	for _, u := range []string{"http://127.0.0.1:8080", "wss://edge.example/prefix/"} {
		if _, err := warren.New(u, "token"); err != nil {
			t.Errorf("New(%q): %v", u, err)
		}
	}
}
