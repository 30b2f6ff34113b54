package roles

import "testing"

func TestReachableAddr(t *testing.T) {
	h := hostname()
	for in, want := range map[string]string{
		":7100":          h + ":7100",
		"0.0.0.0:7100":   h + ":7100",
		"[::]:7100":      h + ":7100",
		"10.1.2.3:7100":  "10.1.2.3:7100",
		"edge.local:80":  "edge.local:80",
		"not a hostport": "not a hostport",
	} {
		if got := reachableAddr(in); got != want {
			t.Errorf("reachableAddr(%q) = %q, want %q", in, got, want)
		}
	}
}
