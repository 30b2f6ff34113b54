package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/warren-mesh/warren/cmd/warren/internal/help"
	warren "github.com/warren-mesh/warren/sdk"
)

func init() {
	register("regions", "list the regions an edge knows and the round trip to each: warren regions [-url U] [-probes N]", runRegions)
}

// runRegions asks the edge at -url for the regions, probes each region's edge and prints what it measured,
// marking the region the SDK would choose (warren.Nearest).
func runRegions(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("regions", flag.ContinueOnError)
	fs.SetOutput(stderr)
	help.Set(fs, "usage: warren regions [flags]\n\nLists the regions, their health and the round trip to each.")
	cf := newClientFlags()
	cf.register(fs)
	probes := fs.Int("probes", 5, "round trips measured per region (their median is reported)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *probes < 1 || *probes > 100 {
		return errors.New("-probes must be 1 to 100")
	}
	c, err := warren.New(cf.url, cf.token, warren.WithUserAgent("warren-cli/"+version))
	if err != nil {
		return badURL(cf.url)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rs, err := c.Regions(ctx)
	if err != nil {
		return err
	}
	ps := warren.ProbeRegions(ctx, nil, rs.Regions, *probes)
	chosen := warren.Hysteresis{}.Choose("", ps)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REGION\tHEALTH\tEDGES\tRTT p50\tURL\t")
	for _, p := range ps {
		rtt := "-"
		if len(p.RTTs) > 0 {
			rtt = p.Median().Round(10 * time.Microsecond).String()
		} else if p.Err != nil {
			rtt = "unreachable"
		}
		mark := ""
		if p.Region.Name == chosen {
			mark = " *"
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%d\t%s\t%s\t\n", p.Region.Name, mark, p.Region.Health, p.Region.Edges, rtt, p.Region.URL)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if chosen == "" {
		return errors.New("no healthy region answered")
	}
	return nil
}
