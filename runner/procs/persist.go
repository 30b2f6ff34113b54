package procs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/internal/blob"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/internal/live"
	"github.com/warren-mesh/warren/runner/internal/web"
)

// The process table outlives the runner (docs/PROTOCOL.md#processes): when the sandbox stops (sleep,
// replacement, shutdown), once every process has ended, the runner records the table (each process's
// wire.ProcInfo, exited, and the tail of its log) in the store that keeps task records (the blob store under
// the sandbox's prefix, so a resume in another region finds it), and the next runner lists those
// processes as exited. The record is written with a compare-and-set fenced by epoch, like the snapshot
// pointer: a runner never replaces the record of a newer epoch, and a runner whose final snapshot was
// fenced writes nothing.
//
// Bounds: at most twice the background process limit (the table's own bound on what it keeps), the last
// procKeptTail bytes of each log, procKeptTotal of all logs together, and procKeptMaxRecord bytes in all
// (command lines are up to wire.MaxProcCommand+wire.MaxProcArgBytes each; the oldest processes are left out
// when the record would grow beyond it).
const (
	procKeptTail      = 64 << 10
	procKeptTotal     = 1 << 20
	procKeptMaxRecord = 8 << 20
	procKeptMaxProcs  = 2 * 1024 // twice the largest MaxProcesses: what any runner's record may hold
	procKeptVersion   = 1
	procKeptTries     = 3
)

// procRecord is the stored table.
type procRecord struct {
	Version int   `json:"version"`
	Epoch   int64 `json:"epoch"`
	// SavedAt makes every write differ (ETags may derive from content).
	SavedAt time.Time  `json:"savedAt"`
	Procs   []keptProc `json:"procs"`
}

// keptProc is one process of the record: its description and the tail of its log.
type keptProc struct {
	Info   wire.ProcInfo    `json:"info"`
	Chunks []wire.ProcChunk `json:"chunks"`
}

// procKeep is where the table is kept, and how the last load went.
type procKeep struct {
	store blob.Store
	key   string
	// loaded: the table holds what the store held at wake (or nothing was there, or it was unreadable
	// garbage), so saving it replaces the record. Otherwise (the store could not be read) the saved
	// record keeps the processes of the one found then, so a readable record is never silently lost.
	loaded bool
	loads  *prometheus.CounterVec
	saves  *prometheus.CounterVec
}

// errProcRecord marks a record that cannot be used.
var errProcRecord = errors.New("process record is corrupt")

// keepIn sets the store of the kept table (the tasks' store and prefix) and registers its metrics.
func (t *Table) keepIn(store blob.Store, prefix string) {
	t.kept = procKeep{store: store, key: prefix + "/procs/table.json",
		loads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_runner_process_table_loads_total",
			Help: "Loads of the process table kept from before a sleep, by outcome (loaded, none, corrupt, unavailable, newer_epoch).",
		}, []string{"outcome"}),
		saves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_runner_process_table_saves_total",
			Help: "Saves of the process table when the sandbox stops, by outcome (saved, skipped: nothing to keep, fenced, trimmed: oldest processes left out to bound the record, error).",
		}, []string{"outcome"}),
	}
	t.cfg.Metrics.MustRegister(t.kept.loads, t.kept.saves)
}

// readKept reads the stored record (blob.ErrNotFound when there is none, errProcRecord when it is
// unusable) and its ETag.
func (t *Table) readKept(ctx context.Context) (procRecord, string, error) {
	k := &t.kept
	o, err := k.store.Stat(ctx, k.key)
	if err != nil {
		return procRecord{}, "", err
	}
	if o.Size > procKeptMaxRecord {
		// Still read for its ETag by save, which replaces it; unusable as a record.
		_, etag, err := k.store.Read(ctx, k.key)
		if err != nil {
			return procRecord{}, "", err
		}
		return procRecord{}, etag, fmt.Errorf("%w: %d bytes, over %d", errProcRecord, o.Size, procKeptMaxRecord)
	}
	data, etag, err := k.store.Read(ctx, k.key)
	if err != nil {
		return procRecord{}, "", err
	}
	rec, err := decodeProcRecord(data)
	return rec, etag, err
}

// Load brings back the table kept by an earlier runner, before the runner serves. A missing, corrupt or
// unreadable record leaves the table empty (logged and counted), never failing the wake.
func (t *Table) Load(ctx context.Context) {
	k := &t.kept
	if k.store == nil {
		return
	}
	rec, _, err := t.readKept(ctx)
	switch {
	case errors.Is(err, blob.ErrNotFound):
		k.loaded = true
		k.loads.WithLabelValues("none").Inc()
		return
	case errors.Is(err, errProcRecord):
		k.loaded = true // garbage: the next save replaces it
		k.loads.WithLabelValues("corrupt").Inc()
		t.log.Error("kept process table is corrupt; starting with an empty table", "key", k.key, "err", err)
		return
	case err != nil:
		k.loads.WithLabelValues("unavailable").Inc()
		t.log.Error("kept process table could not be read; starting with an empty table", "key", k.key, "err", err)
		return
	case rec.Epoch > t.cfg.Epoch:
		k.loads.WithLabelValues("newer_epoch").Inc()
		t.log.Error("kept process table is of a newer epoch; starting with an empty table", "key", k.key,
			"record_epoch", rec.Epoch, "epoch", t.cfg.Epoch)
		return
	}
	// Not trimmed to this runner's limit, which the grant may raise once a request brings it: the decoder
	// bounds the record, and new processes push the oldest exited ones out.
	restored := make([]*proc, 0, len(rec.Procs))
	for _, kp := range rec.Procs {
		restored = append(restored, restoredProc(kp, t.cfg.LogBytes))
	}
	t.procs.Restore(restored)
	k.loaded = true
	k.loads.WithLabelValues("loaded").Inc()
	t.log.Info("kept process table loaded", "key", k.key, "processes", len(rec.Procs), "from_epoch", rec.Epoch)
}

// Save records the table. Called once the runner has stopped every process (they are all exited; one
// that did not exit in time is recorded as ended by the stop). Bounded by ctx.
func (t *Table) Save(ctx context.Context) {
	k := &t.kept
	if k.store == nil {
		return
	}
	procs := t.procs.Items()
	now := t.cfg.Now()
	mine := make([]keptProc, 0, len(procs))
	tail := min(procKeptTail, int64(procKeptTotal/max(len(procs), 1)))
	for _, p := range procs {
		mine = append(mine, keepProc(p, tail, now))
	}
	for try := 0; ; try++ {
		outcome, err := t.saveOnce(ctx, mine, now)
		if errors.Is(err, blob.ErrPrecondition) && try+1 < procKeptTries {
			continue // another write came between the read and ours: read again
		}
		k.saves.WithLabelValues(outcome).Inc()
		switch {
		case err != nil:
			t.log.Error("process table not kept", "key", k.key, "outcome", outcome, "err", err)
		case outcome == "saved" || outcome == "trimmed":
			t.log.Info("process table kept", "key", k.key, "processes", len(mine), "outcome", outcome)
		}
		return
	}
}

// saveOnce reads the record (for its ETag and epoch) and replaces it with mine.
func (t *Table) saveOnce(ctx context.Context, mine []keptProc, now time.Time) (string, error) {
	k := &t.kept
	prev, etag, err := t.readKept(ctx)
	found := true
	switch {
	case errors.Is(err, blob.ErrNotFound):
		found, etag = false, ""
	case errors.Is(err, errProcRecord): // replaced
	case err != nil:
		return "error", err
	case prev.Epoch > t.cfg.Epoch:
		return "fenced", fmt.Errorf("the record is of epoch %d, newer than ours (%d): a newer runner owns the sandbox", prev.Epoch, t.cfg.Epoch)
	case !k.loaded:
		// The wake could not read this record: keep its processes (older than ours) rather than lose them.
		var old []keptProc
		for _, kp := range prev.Procs {
			if !slices.ContainsFunc(mine, func(m keptProc) bool { return m.Info.ID == kp.Info.ID }) {
				old = append(old, kp)
			}
		}
		mine = append(old, mine...)
	}
	if !found && len(mine) == 0 {
		return "skipped", nil
	}
	limit := 2 * t.host.Limit()
	trimmed := false
	if len(mine) > limit {
		mine, trimmed = mine[len(mine)-limit:], true
	}
	// A merged record holds the old record's logs besides this runner's (each bounded to procKeptTotal
	// alone): the decoder refuses a record whose logs are over it, so the oldest processes are left out.
	for keptLogBytes(mine) > procKeptTotal {
		mine, trimmed = mine[1:], true
	}
	for {
		b, err := json.Marshal(procRecord{Version: procKeptVersion, Epoch: t.cfg.Epoch, SavedAt: now.UTC(), Procs: mine})
		if err != nil {
			return "error", fmt.Errorf("encode process table: %w", err)
		}
		if len(b) > procKeptMaxRecord && len(mine) > 0 {
			mine, trimmed = mine[1:], true
			continue
		}
		if _, err := k.store.PutIf(ctx, k.key, b, etag); err != nil {
			return "error", err
		}
		if trimmed {
			return "trimmed", nil
		}
		return "saved", nil
	}
}

// keptLogBytes is the log kept by procs, in all.
func keptLogBytes(procs []keptProc) int64 {
	var n int64
	for _, kp := range procs {
		n += kp.Info.LogEnd - kp.Info.LogStart
	}
	return n
}

// keepProc describes p for the record: exited (a process still running when the runner gave up waiting
// is recorded as killed by the stop, 128+SIGKILL), with the last tail bytes of its log.
func keepProc(p *proc, tail int64, now time.Time) keptProc {
	in := p.info()
	if in.Status != wire.ProcExited {
		code := 128 + 9
		in.Status, in.ExitCode, in.Ended, in.EndedAt = wire.ProcExited, &code, live.EndedSandbox, now.UTC().Format(time.RFC3339Nano)
	}
	chunks, next, _, _ := p.log.since(max(in.LogEnd-tail, 0))
	in.LogEnd = next
	in.LogStart = next
	if len(chunks) > 0 {
		in.LogStart = chunks[0].Offset
	}
	if chunks == nil {
		chunks = []wire.ProcChunk{}
	}
	return keptProc{Info: in, Chunks: chunks}
}

// restoredProc is an exited process of the record, in the table of a new runner.
func restoredProc(k keptProc, logBytes int64) *proc {
	in := k.Info
	l := newProcLog(logBytes)
	l.chunks, l.start, l.end, l.closed = k.Chunks, in.LogStart, in.LogEnd, true
	done := make(chan struct{})
	close(done)
	started, _ := time.Parse(time.RFC3339Nano, in.StartedAt)
	ended, _ := time.Parse(time.RFC3339Nano, in.EndedAt)
	cwd := in.Cwd
	if cwd == "." {
		cwd = ""
	}
	p := &proc{
		id: in.ID, command: in.Command, args: in.Args, cwd: cwd, started: started, log: l,
		cancel: func(error) {}, done: done, stdin: make(chan struct{}, 1),
		ended: ended, exitCode: *in.ExitCode, why: in.Ended, stdinClosed: in.StdinClosed,
	}
	p.stdin <- struct{}{}
	return p
}

// decodeProcRecord parses and checks a stored record. Its writer was a runner, but log contents, command
// lines and the store are not trusted: every field is bounded and checked, and anything off makes the
// whole record errProcRecord.
func decodeProcRecord(data []byte) (procRecord, error) {
	if len(data) > procKeptMaxRecord {
		return procRecord{}, fmt.Errorf("%w: %d bytes, over %d", errProcRecord, len(data), procKeptMaxRecord)
	}
	var rec procRecord
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&rec); err != nil {
		return procRecord{}, fmt.Errorf("%w: %w", errProcRecord, err)
	}
	if dec.More() {
		return procRecord{}, fmt.Errorf("%w: data after the record", errProcRecord)
	}
	bad := func(format string, args ...any) (procRecord, error) {
		return procRecord{}, fmt.Errorf("%w: %s", errProcRecord, fmt.Sprintf(format, args...))
	}
	switch {
	case rec.Version != procKeptVersion:
		return bad("version %d", rec.Version)
	case rec.Epoch < 0:
		return bad("epoch %d", rec.Epoch)
	case len(rec.Procs) > procKeptMaxProcs:
		return bad("%d processes, over %d", len(rec.Procs), procKeptMaxProcs)
	}
	ids := make(map[string]struct{}, len(rec.Procs))
	var total int64
	for i, kp := range rec.Procs {
		n, err := checkKeptProc(kp)
		if err != nil {
			return bad("process %d: %v", i, err)
		}
		if _, dup := ids[kp.Info.ID]; dup {
			return bad("process %d: duplicate id", i)
		}
		ids[kp.Info.ID] = struct{}{}
		if total += n; total > procKeptTotal {
			return bad("logs over %d bytes", procKeptTotal)
		}
	}
	return rec, nil
}

// checkKeptProc checks one process of a record and returns the bytes of log it keeps.
func checkKeptProc(kp keptProc) (int64, error) {
	in := kp.Info
	argBytes := 0
	for _, a := range in.Args {
		argBytes += len(a) + 1
	}
	switch {
	case !validProcID(in.ID):
		return 0, errors.New("bad id")
	case in.Command == "" || len(in.Command) > wire.MaxProcCommand:
		return 0, errors.New("bad command")
	case len(in.Args) > wire.MaxProcArgs || argBytes > wire.MaxProcArgBytes:
		return 0, errors.New("arguments over the bounds")
	case len(in.Cwd) > wire.MaxProcCommand:
		return 0, errors.New("cwd too long")
	case in.Status != wire.ProcExited || in.ExitCode == nil:
		return 0, errors.New("not exited")
	case *in.ExitCode < -1 || *in.ExitCode > 255:
		return 0, fmt.Errorf("exit code %d", *in.ExitCode)
	case !slices.Contains([]string{"", live.EndedKilled, live.EndedSandbox, live.EndedWorkspaceFull}, in.Ended):
		return 0, errors.New("bad ended")
	case in.LogStart < 0 || in.LogEnd < in.LogStart:
		return 0, errors.New("bad log bounds")
	}
	for _, ts := range []string{in.StartedAt, in.EndedAt} {
		if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
			return 0, fmt.Errorf("bad time %q", web.TruncateID(ts))
		}
	}
	off := in.LogStart
	for _, c := range kp.Chunks {
		switch {
		case c.Stream != wire.EventStdout && c.Stream != wire.EventStderr:
			return 0, errors.New("bad stream")
		case c.Offset != off || c.Data == "":
			return 0, errors.New("log chunks not contiguous")
		case !utf8.ValidString(c.Data):
			return 0, errors.New("log not UTF-8")
		}
		off += int64(len(c.Data))
		if off-in.LogStart > procKeptTail {
			return 0, fmt.Errorf("log over %d bytes", procKeptTail)
		}
	}
	if off != in.LogEnd {
		return 0, errors.New("log chunks do not end at logEnd")
	}
	return in.LogEnd - in.LogStart, nil
}

// validProcID accepts the ids newID makes: 16 lowercase hex digits.
func validProcID(id string) bool {
	if len(id) != 16 {
		return false
	}
	for i := range len(id) {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
