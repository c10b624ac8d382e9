package seal

import (
	"bytes"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/store"
)

// BenchmarkSealOpen measures sealing and opening one record alone, at the
// handler benchmarks' sizes (proxy.BenchmarkHandlerSealed has the whole
// request).
func BenchmarkSealOpen(b *testing.B) {
	kr, err := Parse("bench", []byte("k "+testKey(7)))
	if err != nil {
		b.Fatal(err)
	}
	for _, size := range []int{200, 16 << 10, 1 << 20} {
		rec := &store.Record{Status: 200, Header: map[string][]string{"Content-Type": {"application/json"}, "Content-Length": {fmt.Sprint(size)}},
			Body: bytes.Repeat([]byte{'x'}, size)}
		sealed := kr.seal("8e03978e40d543e8bc936894a57f9324", rec)
		b.Run(fmt.Sprintf("seal/size=%d", size), func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				kr.seal("8e03978e40d543e8bc936894a57f9324", rec)
			}
		})
		b.Run(fmt.Sprintf("open/size=%d", size), func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				if _, err := kr.open("8e03978e40d543e8bc936894a57f9324", sealed); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// reportCPU reports the process's CPU time per iteration as cpu-ns/op when
// the returned function runs: on a shared machine wall time also counts
// the waits for a CPU.
func reportCPU(b *testing.B) func() {
	start := cpuTime()
	return func() { b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op") }
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
