package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/warren-mesh/warren/internal/devstack"
)

// parseLevels parses -density: user counts, comma-separated, each above the one before.
func parseLevels(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("-density %q: want user counts, each above the one before (10,100,1000)", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// benchDensity brings idle users up to each of levels in turn (a new user's connect → ready, then the client
// leaves: the sandbox is up, with no client and no turn) and prints what they cost in memory and how many fit
// in a GiB: the proportional set size (PSS) of every user's runner and its descendants (the network's and
// the sandbox's processes, the agent's when it runs), and the drop of the host's MemAvailable since before
// the first (all told: the kernel's part too, the namespaces, pairs, cgroups and page cache, but also
// whatever else the host did meanwhile).
func benchDensity(ctx context.Context, stdout io.Writer, st *devstack.Stack, mint func(string) (string, error), levels []int, conc int) error {
	before, err := memAvailableKiB()
	if err != nil {
		return err
	}
	var pids []string
	for _, level := range levels {
		next, err := connectIdle(ctx, st, mint, len(pids), level, conc)
		if err != nil {
			return err
		}
		pids = append(pids, next...)
		pss, procs, err := treesPSSKiB(pids)
		if err != nil {
			return err
		}
		after, err := memAvailableKiB()
		if err != nil {
			return err
		}
		perPSS, perAll := float64(pss)/float64(level), float64(before-after)/float64(level)
		fmt.Fprintf(stdout, "%-44s n=%-4d PSS %.1f MiB/user (%.1f processes/user) → %s users/GiB; all told (host MemAvailable) %.1f MiB/user → %s users/GiB\n",
			"idle users (sandbox up, no client, no turn)", level, perPSS/1024, float64(procs)/float64(level), perGiB(perPSS), perAll/1024, perGiB(perAll))
	}
	return nil
}

// perGiB is how many of something costing kib KiB fit in a GiB.
func perGiB(kib float64) string {
	if kib <= 0 {
		return "∞ (lost in the noise)"
	}
	return strconv.FormatFloat((1<<20)/kib, 'f', 0, 64)
}

// connectIdle connects the new users density-user-from … density-user-(to-1), conc at once, each leaving
// once ready, and returns their runners' pids.
func connectIdle(ctx context.Context, st *devstack.Stack, mint func(string) (string, error), from, to, conc int) ([]string, error) {
	pids := make([]string, to-from)
	errs := make(chan error, to-from)
	sem := make(chan struct{}, max(1, conc))
	var wg sync.WaitGroup
	for i := from; i < to; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			user := "density-user-" + strconv.Itoa(i)
			if _, err := connectOnce(ctx, st, mint, user, ""); err != nil {
				errs <- fmt.Errorf("density user %d: %w", i, err)
				return
			}
			e, err := st.Registry.Lookup(ctx, devstack.DevIssuer, user)
			if err != nil {
				errs <- fmt.Errorf("density user %d: %w", i, err)
				return
			}
			pids[i-from] = e.Alloc
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return nil, err
	}
	return pids, nil
}

// treesPSSKiB sums the PSS of the processes roots (pids) and all their descendants, and counts them.
func treesPSSKiB(roots []string) (kib int64, procs int, err error) {
	pids, err := treePIDs(roots)
	if err != nil {
		return 0, 0, err
	}
	for _, pid := range pids {
		pss, err := pssKiB(pid)
		if err != nil {
			continue // exited meanwhile
		}
		kib += pss
		procs++
	}
	return kib, procs, nil
}

// treePIDs are the processes roots (pids) and all their descendants.
func treePIDs(roots []string) ([]string, error) {
	children := map[string][]string{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // not a process, or gone
		}
		s := string(st)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 {
			children[f[1]] = append(children[f[1]], e.Name())
		}
	}
	seen := map[string]bool{}
	var pids []string
	todo := slices.Clone(roots)
	for len(todo) > 0 {
		pid := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		pids = append(pids, pid)
		todo = append(todo, children[pid]...)
	}
	return pids, nil
}

// pssKiB is the Pss line of /proc/pid/smaps_rollup.
func pssKiB(pid string) (int64, error) {
	return procField("/proc/"+pid+"/smaps_rollup", "Pss:")
}

// memAvailableKiB is the host's MemAvailable.
func memAvailableKiB() (int64, error) {
	return procField("/proc/meminfo", "MemAvailable:")
}

// procField is the value in kB of the line starting with key in the /proc file path.
func procField(path, key string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in %s", key, path)
}
