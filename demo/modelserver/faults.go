package modelserver

import (
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// spikeAt reports whether a latency spike is active elapsed after start.
// Spikes begin at SpikeEvery, 2×SpikeEvery, ... and last SpikeFor, so a
// fresh server starts healthy.
func (f Faults) spikeAt(elapsed time.Duration) bool {
	if f.SpikeEvery <= 0 || f.SpikeFor <= 0 || f.SpikeExtra <= 0 || elapsed < f.SpikeEvery {
		return false
	}
	return elapsed%f.SpikeEvery < f.SpikeFor
}

// startFaults starts the background faults: the leak and the neighbour.
func (s *Server) startFaults() {
	if rate := s.faults.LeakBytesPerSec; rate > 0 {
		s.bg.Go(func() { s.leak.run(rate, s.stop) })
	}
	if cpus := s.faults.NeighbourCPUs; cpus > 0 {
		after := s.faults.NeighbourAfter
		if argv := s.faults.NeighbourCommand; len(argv) > 0 {
			s.bg.Go(func() {
				if !s.wait(after) {
					return
				}
				if err := runNeighbourProcess(argv, cpus, s.stop); err != nil {
					slog.Error("modelserver: neighbour process", "err", err)
				}
			})
			return
		}
		n := int(math.Ceil(cpus))
		duty := cpus / float64(n)
		for range n {
			s.bg.Go(func() {
				if s.wait(after) {
					s.neighbour.burn(duty, s.stop)
				}
			})
		}
	}
}

// wait sleeps d unless the server stops first; it reports whether it did
// not.
func (s *Server) wait(d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.stop:
		return false
	case <-t.C:
		return true
	}
}

// runNeighbourProcess runs argv until stop, then closes its stdin and kills
// it. The child gets GOMAXPROCS for its share of cores, so a Go child is
// not capped at the machine's count, and the stdin pipe ends it should this
// process die first (a killed parent cannot kill its child).
func runNeighbourProcess(argv []string, cpus float64, stop <-chan struct{}) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "GOMAXPROCS="+strconv.Itoa(int(math.Ceil(cpus))))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("stdin of %s: %w", argv[0], err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", argv[0], err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		return fmt.Errorf("%s exited early: %v", argv[0], err)
	case <-stop:
	}
	in.Close()
	cmd.Process.Kill()
	<-exited
	return nil
}

// BurnCPU burns cpus cores' worth of CPU in duty-cycled busy goroutines
// until stop closes: the body of a neighbour process.
func BurnCPU(cpus float64, stop <-chan struct{}) {
	if cpus <= 0 {
		return
	}
	n := int(math.Ceil(cpus))
	var nb neighbour
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { nb.burn(cpus/float64(n), stop) })
	}
	wg.Wait()
}

// StopOnEOF returns a channel closed when r ends: a neighbour process's
// stdin, so that it ends with its parent.
func StopOnEOF(r io.Reader) <-chan struct{} {
	c := make(chan struct{})
	go func() {
		io.Copy(io.Discard, r)
		close(c)
	}()
	return c
}

// LeakedBytes is how much memory the leak fault retains now.
func (s *Server) LeakedBytes() int64 { return s.leak.total.Load() }

// leak retains memory that is never used again. Pages are written so the
// kernel must back them: the leak shows in RSS, not only in the Go heap.
type leak struct {
	mu     sync.Mutex
	chunks [][]byte
	total  atomic.Int64
}

const pageSize = 4096

func (l *leak) run(rate int64, stop <-chan struct{}) {
	start := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		// Catch up to the rate from the elapsed time, so a late tick does
		// not slow the leak down.
		want := int64(float64(rate) * time.Since(start).Seconds())
		if n := want - l.total.Load(); n > 0 {
			l.grow(n)
		}
	}
}

func (l *leak) grow(n int64) {
	b := make([]byte, n)
	for i := 0; i < len(b); i += pageSize {
		b[i] = 1
	}
	l.mu.Lock()
	l.chunks = append(l.chunks, b)
	l.mu.Unlock()
	l.total.Add(n)
}

func (l *leak) release() {
	l.mu.Lock()
	l.chunks = nil
	l.mu.Unlock()
	l.total.Store(0)
}

// neighbour burns CPU in a duty cycle, like a co-located batch job.
type neighbour struct {
	sink atomic.Uint64 // keeps the spin loop's result alive
}

const neighbourPeriod = 10 * time.Millisecond

func (nb *neighbour) burn(duty float64, stop <-chan struct{}) {
	busy := time.Duration(duty * float64(neighbourPeriod))
	idle := neighbourPeriod - busy
	x := uint64(1)
	for {
		select {
		case <-stop:
			nb.sink.Store(x)
			return
		default:
		}
		until := time.Now().Add(busy)
		for time.Now().Before(until) {
			for range 1024 {
				x = x*6364136223846793005 + 1442695040888963407
			}
		}
		if idle > 0 {
			time.Sleep(idle)
		}
	}
}
