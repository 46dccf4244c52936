package table

import (
	"context"
	"io"
	"os"
	"strings"
	"time"
)

// grace lets records of the second just ended reach the table before it is
// printed: the pipeline delivers them slightly after the calls end.
const grace = 250 * time.Millisecond

// clearScreen homes the cursor and clears a terminal between frames.
const clearScreen = "\x1b[H\x1b[2J"

// Run prints a frame every interval (default 1s) until ctx is done: the
// header lines (if header is set), then Render. Ticks fall just after whole
// seconds so each frame shows a complete second. On a terminal each frame
// replaces the last; elsewhere frames follow one another.
func (t *Table) Run(ctx context.Context, every time.Duration, header func() []string) {
	if every <= 0 {
		every = time.Second
	}
	clear := isTerminal(t.w)
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		now := time.Now()
		next := now.Truncate(time.Second).Add(grace)
		for !next.After(now) {
			next = next.Add(every)
		}
		timer.Reset(next.Sub(now))
		select {
		case <-ctx.Done():
			return
		case now = <-timer.C:
		}

		var b strings.Builder
		if clear {
			b.WriteString(clearScreen)
		}
		if header != nil {
			for _, l := range header() {
				b.WriteString(l + "\n")
			}
		}
		b.WriteString(t.Render(now))
		if !clear {
			b.WriteString("\n")
		}
		if _, err := io.WriteString(t.w, b.String()); err != nil {
			return // the terminal is gone; nothing left to show
		}
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
