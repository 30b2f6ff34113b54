package isolate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A socket table is read up to maxNetTable bytes: a sandbox that opens many sockets makes a wait for a port
// read (every 50 ms) a bounded amount, and the listening sockets, which the kernel lists first, are still
// found.
func TestReadNetTableBounded(t *testing.T) {
	head := "  sl  local_address rem_address   st\n   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1\n"
	established := "   1: 0100007F:0050 0100007F:C350 01 00000000:00000000 00:00000000 00000000  1000        0 2\n"
	p := filepath.Join(t.TempDir(), "tcp")
	if err := os.WriteFile(p, []byte(head+strings.Repeat(established, 4*maxNetTable/len(established))), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := readNetTable(p)
	if err != nil || len(b) != maxNetTable {
		t.Fatalf("read %d bytes of a %d byte table: %v", len(b), 4*maxNetTable, err)
	}
	if got := listeningPorts(string(b)); len(got) != 1 || got[0] != 8080 {
		t.Fatalf("listening ports %v", got)
	}
}
