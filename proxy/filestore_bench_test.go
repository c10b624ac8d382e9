package proxy

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/idempotency-proxy/idempotency-proxy/store/filestore"
)

// The handler on the file store, with and without fsync: a miss is two
// commits (lease, record), a hit one read transaction. The parallel miss
// shows group commit: concurrent requests share a commit and its fsync.
//
//	go test -run '^$' -bench FileStore -benchmem ./proxy

func fileStoreRig(b *testing.B, fsync bool) *benchRig {
	st, err := filestore.Open(filestore.Options{Path: b.TempDir(), Fsync: fsync})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	return newBenchRig(b, func(o *Options) { o.Store = st })
}

func fsyncName(fsync bool) string {
	if fsync {
		return "fsync"
	}
	return "nofsync"
}

func BenchmarkHandlerFileStoreMiss(b *testing.B) {
	for _, fsync := range []bool{false, true} {
		b.Run(fsyncName(fsync), func(b *testing.B) {
			rig := fileStoreRig(b, fsync)
			loopMisses(b, rig.serve)
		})
	}
}

func BenchmarkHandlerFileStoreHit(b *testing.B) { loopHits(b, fileStoreRig(b, false)) }

// BenchmarkHandlerFileStoreMissParallel sends new keys from 32 goroutines
// per CPU through one handler.
func BenchmarkHandlerFileStoreMissParallel(b *testing.B) {
	for _, fsync := range []bool{false, true} {
		b.Run(fsyncName(fsync), func(b *testing.B) {
			h := fileStoreRig(b, fsync).h
			var n atomic.Int64
			b.SetParallelism(32)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				rig := newBenchRig(b)
				rig.h = h
				prefix := "par-" + strconv.FormatInt(n.Add(1), 10) + "-"
				for i := 0; pb.Next(); i++ {
					if got := rig.serve(prefix + strconv.Itoa(i)); got != http.StatusOK {
						b.Errorf("status %d, want 200", got)
						return
					}
				}
			})
		})
	}
}
