package testenv

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func consulDo(t *testing.T, method, url, body string) (int, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(bytes.TrimSpace(b)), nil
}

// A dev agent comes up as leader on its own ports with the settings the registry tests rely on, loses its
// state across Stop and Start, and keeps its address.
func TestConsul(t *testing.T) {
	s := StartConsul(t)
	base := "http://" + s.Addr()

	var leader string
	if err := getJSON(base+"/v1/status/leader", &leader); err != nil || leader == "" {
		t.Fatalf("leader = %q, %v", leader, err)
	}
	var self struct {
		Config      struct{ NodeName string }
		DebugConfig struct {
			SessionTTLMin      string
			DNSPort            int
			GRPCPort           int
			HTTPPort           int
			DisableUpdateCheck bool
		}
	}
	if err := getJSON(base+"/v1/agent/self", &self); err != nil {
		t.Fatal(err)
	}
	if self.Config.NodeName != s.Node() {
		t.Errorf("node %q, want %q", self.Config.NodeName, s.Node())
	}
	dc := self.DebugConfig
	if dc.SessionTTLMin != "1s" || dc.DNSPort != -1 || dc.GRPCPort != -1 || !dc.DisableUpdateCheck ||
		fmt.Sprint(dc.HTTPPort) != strings.TrimPrefix(s.Addr(), "127.0.0.1:") {
		t.Errorf("agent config %+v", dc)
	}
	// Sessions as short as one second are accepted.
	if code, body, err := consulDo(t, "PUT", base+"/v1/session/create", `{"TTL":"1s"}`); err != nil || code != 200 {
		t.Fatalf("create 1s session: %d %s %v", code, body, err)
	}
	if code, body, err := consulDo(t, "PUT", base+"/v1/kv/probe", "42"); err != nil || code != 200 {
		t.Fatalf("put: %d %s %v", code, body, err)
	}

	addr := s.Addr()
	s.Stop(t)
	if s.Running() {
		t.Fatal("running after Stop")
	}
	if _, _, err := consulDo(t, "GET", base+"/v1/status/leader", ""); err == nil {
		t.Fatal("a stopped agent answered")
	}
	s.Start(t)
	if s.Addr() != addr {
		t.Fatalf("address %s after restart, want %s", s.Addr(), addr)
	}
	// Dev mode: the KV store is empty again.
	if code, body, err := consulDo(t, "GET", base+"/v1/kv/probe", ""); err != nil || code != 404 {
		t.Fatalf("get after restart: %d %s %v, want 404", code, body, err)
	}
}

// Two agents in one test binary do not collide.
func TestConsulTwo(t *testing.T) {
	a, b := StartConsul(t), StartConsul(t)
	if a.Addr() == b.Addr() || a.Node() == b.Node() {
		t.Fatalf("agents share an address or a node name: %s %s, %s %s", a.Addr(), a.Node(), b.Addr(), b.Node())
	}
	if code, _, err := consulDo(t, "PUT", "http://"+a.Addr()+"/v1/kv/only-a", "1"); err != nil || code != 200 {
		t.Fatalf("put: %d %v", code, err)
	}
	if code, _, err := consulDo(t, "GET", "http://"+b.Addr()+"/v1/kv/only-a", ""); err != nil || code != 404 {
		t.Fatalf("the other agent: %d %v, want 404", code, err)
	}
}

// StartConsulACL's agent denies what no token allows and lets its management token do anything.
func TestConsulACL(t *testing.T) {
	s := StartConsulACL(t)
	if s.ManagementToken() == "" {
		t.Fatal("no management token")
	}
	base := "http://" + s.Addr()
	if code, body, err := consulDo(t, http.MethodPut, base+"/v1/kv/acl-test", "x"); err != nil || code != http.StatusForbidden {
		t.Fatalf("anonymous KV write = %d %q, %v; want 403", code, body, err)
	}
	if code, body, err := consulDo(t, http.MethodPut, base+"/v1/kv/acl-test?token="+s.ManagementToken(), "x"); err != nil || code != http.StatusOK {
		t.Fatalf("management KV write = %d %q, %v", code, body, err)
	}
}
