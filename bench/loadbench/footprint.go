//go:build linux

package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/idempotency-proxy/idempotency-proxy/store/memory"
)

// The footprint run (--footprint) drives the memory store directly, in a
// process of its own so that the RSS it reports is the store's and the Go
// runtime's only, with the records the proxy keeps for the benchmark's
// upstream response: what a proxy holding that many keys needs, without the
// minute or more of load it takes to record them over HTTP
// (--footprint-proxy, footprint_proxy.go).

// footprint is what filling a memory store measured.
type footprint struct {
	records    int
	encoded    int           // bytes of one encoded record
	accounted  int64         // the store's own count (what max_bytes bounds)
	heapBefore uint64        // live heap before the fill, after a collection
	heapAfter  uint64        // live heap after the fill, after a collection
	rssBefore  int64         // VmRSS before the fill
	rssAfter   int64         // VmRSS straight after the fill: with the garbage a running process carries
	rssSettled int64         // VmRSS after a collection that returns free memory to the system
	took       time.Duration // the fill
}

// typicalRecord is what the proxy records for the benchmark's upstream
// response: status, Content-Type, Date, the Content-Length a replay sends,
// the 199-byte body, fingerprint and completion time.
func typicalRecord(i int) *store.Record {
	return &store.Record{
		Status: 200,
		Header: map[string][]string{
			"Content-Type":   {"application/json"},
			"Date":           {"Mon, 30 Nov 2026 09:00:00 GMT"},
			"Content-Length": {strconv.Itoa(len(upstreamBody))},
		},
		Body:        upstreamBody,
		Fingerprint: sha256.Sum256(binary.AppendUvarint(nil, uint64(i))),
		CreatedAt:   time.Now(),
	}
}

// storeKey has the shape of the proxy's storage keys: 128 bits in hex.
func storeKey(i int) string {
	sum := sha256.Sum256(binary.BigEndian.AppendUint64([]byte("key"), uint64(i)))
	return hex.EncodeToString(sum[:16])
}

// fill records n typical records in a new memory store and measures it.
// Every record is read back at the end, so a store that refused or lost
// one fails the run rather than flattering it.
func fill(n int) (footprint, error) {
	ctx := context.Background()
	fp := footprint{records: n, encoded: store.EncodedSize(typicalRecord(0))}
	fp.heapBefore, fp.rssBefore = settle()
	// No sweeper: nothing expires within the run (a day's TTL), and a
	// background goroutine would only blur the figures.
	s := memory.New(memory.Options{SweepInterval: -1})
	defer s.Close()
	start := time.Now()
	for i := range n {
		rec := typicalRecord(i)
		key := storeKey(i)
		b, err := s.Begin(ctx, key, store.Lease{Fingerprint: rec.Fingerprint}, 30*time.Second)
		if err != nil {
			return fp, fmt.Errorf("record %d: begin: %w", i, err)
		}
		if b.State != store.Acquired {
			return fp, fmt.Errorf("record %d: begin found %v, want a new key", i, b.State)
		}
		if err := s.Complete(ctx, key, b.Token, rec, 24*time.Hour); err != nil {
			return fp, fmt.Errorf("record %d: complete: %w", i, err)
		}
	}
	fp.took = time.Since(start)
	fp.rssAfter = rss()
	fp.accounted = s.UsedBytes()
	fp.heapAfter, fp.rssSettled = settle()
	for i := range n {
		e, err := s.Inspect(ctx, storeKey(i))
		if err != nil || e.Record == nil || len(e.Record.Body) != len(upstreamBody) {
			return fp, fmt.Errorf("record %d: read back: %v", i, err)
		}
	}
	runtime.KeepAlive(s)
	return fp, nil
}

// settle collects garbage, returns free memory to the system and reads the
// live heap and the RSS.
func settle() (heap uint64, rssBytes int64) {
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, rss()
}

// rss returns this process's resident set size in bytes, -1 if unknown.
func rss() int64 { return rssOf(os.Getpid()) }

// fillMemoryStore is the child's side of --footprint.
func fillMemoryStore(n int, w io.Writer) error {
	fp, err := fill(n)
	if err != nil {
		return err
	}
	fp.write(w)
	return nil
}

func (fp footprint) write(w io.Writer) {
	per := func(b int64) string { return fmt.Sprintf("%.0f B/record", float64(b)/float64(fp.records)) }
	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	fmt.Fprintf(w, "memory store, %d records of %d bytes encoded (199-byte body, 3 header fields, 32-hex-digit key), filled in %s, GOMAXPROCS %d, GOGC default\n",
		fp.records, fp.encoded, fp.took.Round(time.Millisecond), runtime.GOMAXPROCS(0))
	fmt.Fprintf(w, "  store's own account (what store.memory.max_bytes bounds): %s, %s\n", mib(fp.accounted), per(fp.accounted))
	heap := int64(fp.heapAfter) - int64(fp.heapBefore)
	fmt.Fprintf(w, "  live heap added:                                          %s, %s\n", mib(heap), per(heap))
	fmt.Fprintf(w, "  RSS before the fill:                                      %s\n", mib(fp.rssBefore))
	fmt.Fprintf(w, "  RSS straight after the fill (garbage not yet collected):  %s, %s over the start\n", mib(fp.rssAfter), per(fp.rssAfter-fp.rssBefore))
	fmt.Fprintf(w, "  RSS after a collection returning free memory:             %s, %s over the start\n", mib(fp.rssSettled), per(fp.rssSettled-fp.rssBefore))
}

// measureFootprint runs fill in a child process, on the servers' CPU with
// GOMAXPROCS=1 under the pinned layout, and prints what it measured.
func measureFootprint(n int, lay layout, stdout, stderr io.Writer) error {
	kids, err := newChildren(lay)
	if err != nil {
		return err
	}
	defer kids.killAll()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "loadbench: filling a memory store with %d records\n", n)
	cmd, err := kids.start("footprint", self, []string{"--fill-memory-store", strconv.Itoa(n)}, lay.childEnv())
	if err != nil {
		return err
	}
	werr := cmd.Wait()
	out, err := os.ReadFile(filepath.Join(kids.dir, "footprint.log"))
	if err != nil {
		return err
	}
	if werr != nil {
		return fmt.Errorf("filling the memory store: %w\n%s", werr, out)
	}
	fmt.Fprintf(stdout, "loadbench --footprint: %s, layout %s\n", runtime.Version(), lay.name)
	_, err = stdout.Write(out)
	return err
}
