package procs

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/internal/live"
)

// FuzzDecodeProcRecord: the kept process table is read back from the store, and its log tails are what
// the tenant's processes printed. A record is either refused as errProcRecord or holds only bounded,
// well-formed processes, which a new table can serve: the logs answer exactly the kept bytes at their
// offsets, and encoding it again gives a record that decodes the same.
func FuzzDecodeProcRecord(f *testing.F) {
	code := 3
	valid := procRecord{Version: procKeptVersion, Epoch: 7, SavedAt: time.Unix(1, 0).UTC(), Procs: []keptProc{{
		Info: wire.ProcInfo{ID: "0123456789abcdef", Command: "echo hi", Args: []string{"-c", "x"}, Cwd: ".",
			Status: wire.ProcExited, ExitCode: &code, Ended: live.EndedSandbox, StartedAt: "2026-01-01T00:00:00Z",
			EndedAt: "2026-01-01T00:00:01.5Z", LogStart: 10, LogEnd: 19},
		Chunks: []wire.ProcChunk{{Stream: wire.EventStdout, Offset: 10, Data: "héllo"}, {Stream: wire.EventStderr, Offset: 16, Data: "\x00\n\""}},
	}}}
	b, _ := json.Marshal(valid)
	f.Add(b)
	f.Add([]byte(`{"version":1,"epoch":0,"procs":[]}`))
	f.Add([]byte(`{"version":1,"epoch":1,"procs":[{"info":{"id":"0123456789abcdef","command":"x","status":"exited","exitCode":0,"startedAt":"x","endedAt":"x","logStart":5,"logEnd":4}}]}`))
	f.Add([]byte(strings.Replace(string(b), `"offset":16`, `"offset":15`, 1)))
	f.Add([]byte(strings.Replace(string(b), `"0123456789abcdef"`, `"../../x"`, 1)))
	f.Add([]byte(`{"version":1,"procs":null} {}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := decodeProcRecord(data)
		if err != nil {
			if !errors.Is(err, errProcRecord) {
				t.Fatalf("refusal is not errProcRecord: %v", err)
			}
			return
		}
		if rec.Version != procKeptVersion || rec.Epoch < 0 || len(rec.Procs) > procKeptMaxProcs {
			t.Fatalf("accepted %+v", rec)
		}
		var total int64
		for _, kp := range rec.Procs {
			in := kp.Info
			if !validProcID(in.ID) || in.Status != wire.ProcExited || in.ExitCode == nil || in.LogEnd-in.LogStart > procKeptTail {
				t.Fatalf("accepted process %+v", in)
			}
			total += in.LogEnd - in.LogStart
			p := restoredProc(kp, 1<<20)
			got := p.info()
			if got.ID != in.ID || got.Status != wire.ProcExited || *got.ExitCode != *in.ExitCode || got.LogStart != in.LogStart || got.LogEnd != in.LogEnd {
				t.Fatalf("restored %+v from %+v", got, in)
			}
			chunks, next, closed, _ := p.log.since(0)
			n := int64(0)
			for _, c := range chunks {
				n += int64(len(c.Data))
			}
			if !closed || next != in.LogEnd || n != in.LogEnd-in.LogStart {
				t.Fatalf("restored log: %d bytes to %d (closed %v), want %d..%d", n, next, closed, in.LogStart, in.LogEnd)
			}
		}
		if total > procKeptTotal {
			t.Fatalf("accepted %d bytes of logs", total)
		}
		again, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeProcRecord(again); err != nil {
			t.Fatalf("re-encoded record refused: %v", err)
		}
	})
}
