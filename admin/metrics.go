package admin

import (
	"github.com/idempotency-proxy/idempotency-proxy/store"
	"github.com/prometheus/client_golang/prometheus"
)

// Results, the values of the "result" label.
const (
	resultOK           = "ok"
	resultNotFound     = "not_found"
	resultBadRequest   = "bad_request"
	resultUnauthorized = "unauthorized"
	resultError        = "error"
)

var (
	operations = []string{opGet, opDelete, opList, opHash, opConfig, opReport}
	results    = []string{resultOK, resultNotFound, resultBadRequest, resultUnauthorized, resultError}
)

// Metrics are the admin listener's collectors.
type Metrics struct {
	ops            *prometheus.CounterVec
	evictionUnsafe prometheus.Gauge
	full           prometheus.Gauge
	dataLoss       prometheus.Counter
	lockTTLUnsafe  prometheus.Gauge
	reloadOK       prometheus.Gauge
	reloads        *prometheus.CounterVec
}

// The values of idempotency_proxy_config_reloads_total's "result" label.
const (
	reloadApplied  = "applied"
	reloadRejected = "rejected"
)

// NewMetrics registers the admin metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idempotency_proxy_admin_operations_total",
			Help: "Operator key API calls, by operation (get, delete, list, hash, config, report) and result.",
		}, []string{"operation", "result"}),
		evictionUnsafe: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idempotency_proxy_store_eviction_unsafe",
			Help: "1 when the store may evict the proxy's keys on its own (Redis maxmemory-policy other than noeviction).",
		}),
		full: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idempotency_proxy_store_full",
			Help: "1 when the store refuses writes for lack of space (memory or file store at max_bytes or on a full disk, Redis at maxmemory).",
		}),
		dataLoss: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idempotency_proxy_store_data_loss_total",
			Help: "Times the store was found to have forgotten what it held while the proxy ran (Redis restarted without persistence or from an older snapshot, flushed, or failed over to a replica without the data).",
		}),
		lockTTLUnsafe: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idempotency_proxy_lock_ttl_unsafe",
			Help: "1 when a route's lock_ttl cannot outlive a failover of the store (Sentinel down-after-milliseconds plus the election).",
		}),
		reloadOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "idempotency_proxy_config_last_reload_successful",
			Help: "1 when the last reload of the configuration applied (or none was tried), 0 when it was rejected: the file in place is not the configuration in force.",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idempotency_proxy_config_reloads_total",
			Help: "Reloads of the configuration (a change of its files, or SIGHUP), by result: applied, or rejected (the previous configuration stays in force).",
		}, []string{"result"}),
	}
	reg.MustRegister(m.ops, m.evictionUnsafe, m.full, m.dataLoss, m.lockTTLUnsafe, m.reloadOK, m.reloads)
	m.reloadOK.Set(1)
	m.reloads.WithLabelValues(reloadApplied)
	m.reloads.WithLabelValues(reloadRejected)
	// Every series exists from the start, so rate() and alerts see the
	// first delete.
	for _, op := range operations {
		for _, res := range results {
			m.ops.WithLabelValues(op, res)
		}
	}
	return m
}

// Reloaded counts a reload of the configuration: applied, or rejected
// with the previous configuration kept in force.
func (m *Metrics) Reloaded(applied bool) {
	if !applied {
		m.reloadOK.Set(0)
		m.reloads.WithLabelValues(reloadRejected).Inc()
		return
	}
	m.reloadOK.Set(1)
	m.reloads.WithLabelValues(reloadApplied).Inc()
}

func (m *Metrics) count(op, result string) {
	if op == "other" {
		return // unknown /admin/ paths are not an operation
	}
	m.ops.WithLabelValues(op, result).Inc()
}

// RegisterStoreStats exposes the size of a store that keeps it (the
// memory and file stores, store.StatsReporter) on reg, read at every
// scrape.
func RegisterStoreStats(reg prometheus.Registerer, st store.StatsReporter) {
	reg.MustRegister(statsCollector{st})
}

var (
	descBytes = prometheus.NewDesc("idempotency_proxy_store_bytes",
		"Bytes of recorded data held by the memory or file store (keys, headers and bodies).", nil, nil)
	descRecords = prometheus.NewDesc("idempotency_proxy_store_records",
		"Completed records held by the memory or file store.", nil, nil)
	descEvictions = prometheus.NewDesc("idempotency_proxy_store_evictions_total",
		"Completed records the memory or file store dropped to make room (when_full: evict_oldest).", nil, nil)
)

type statsCollector struct{ st store.StatsReporter }

func (c statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descBytes
	ch <- descRecords
	ch <- descEvictions
}

func (c statsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.st.Stats()
	ch <- prometheus.MustNewConstMetric(descBytes, prometheus.GaugeValue, float64(s.Bytes))
	ch <- prometheus.MustNewConstMetric(descRecords, prometheus.GaugeValue, float64(s.Records))
	ch <- prometheus.MustNewConstMetric(descEvictions, prometheus.CounterValue, float64(s.Evictions))
}

var descReplicaAckFailures = prometheus.NewDesc("idempotency_proxy_store_replica_ack_failures_total",
	"Leases (begin) and records (complete) fewer than store.redis.replica_ack replicas acknowledged in time.",
	[]string{"operation"}, nil)

// RegisterReplicaAck exposes the Redis store's replica acknowledgement
// failures on reg, read from failures at every scrape.
func RegisterReplicaAck(reg prometheus.Registerer, failures func() (begin, complete uint64)) {
	reg.MustRegister(replicaAckCollector(failures))
}

type replicaAckCollector func() (begin, complete uint64)

func (c replicaAckCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descReplicaAckFailures }

func (c replicaAckCollector) Collect(ch chan<- prometheus.Metric) {
	begin, complete := c()
	ch <- prometheus.MustNewConstMetric(descReplicaAckFailures, prometheus.CounterValue, float64(begin), "begin")
	ch <- prometheus.MustNewConstMetric(descReplicaAckFailures, prometheus.CounterValue, float64(complete), "complete")
}
