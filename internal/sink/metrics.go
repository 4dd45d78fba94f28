package sink

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/buckets"
)

type metrics struct {
	rows            *prometheus.CounterVec
	commits         prometheus.Counter
	commitErrors    prometheus.Counter
	commitSeconds   prometheus.Histogram
	batchRows       prometheus.Histogram
	queued          prometheus.Gauge
	busy            prometheus.Counter
	auditDuplicates prometheus.Counter
	auditConflicts  prometheus.Counter
	seriesDays      prometheus.Gauge
	settled         prometheus.Gauge
	catalogueReads  prometheus.Counter
	entries         *prometheus.CounterVec
	queueCapacity   prometheus.Gauge
	overBound       prometheus.Counter
	splitsMax       prometheus.Gauge
	splitsLimit     prometheus.Gauge
	commitDelays    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_sink_rows_written_total", Help: "Rows made durable, by kind.",
		}, []string{"kind"}),
		commits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_sink_commits_total", Help: "Durable commits.",
		}),
		commitErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_sink_commit_errors_total", Help: "Commits that failed; their requests were answered with an error.",
		}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_sink_commit_seconds", Help: "Time to make one batch durable.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		batchRows: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_sink_batch_rows", Help: "Rows per commit.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10),
		}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_sink_queued_rows", Help: "Rows admitted and not yet durable.",
		}),
		busy: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_sink_busy_total", Help: "Requests refused because the pipeline was full.",
		}),
		auditDuplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_sink_audit_duplicates_total", Help: "Audit events skipped because their event_id was already stored.",
		}),
		auditConflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_sink_audit_conflicts_total", Help: "Audit events refused (409) because their event_id was stored with a different payload.",
		}),
		seriesDays: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_buckets_series_days", Help: "Series-days whose bucketing state is held in memory.",
		}),
		settled: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_buckets_settled_series_days",
			Help: "Series-days forgotten by the bucket planner that it remembers compactly, so that their next write reads no catalogue (buckets.max_settled_series_days).",
		}),
		catalogueReads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_buckets_catalogue_reads_total",
			Help: "Series-days whose partition catalogue was read from the store: for writes, when the bucket planner neither held nor remembered them, and for the partitions listing.",
		}),
		entries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_sink_catalogue_entries_total",
			Help: "Partition catalogue entries written, by why: placed (rows outgrew the entry) or settled (made exact again).",
		}, []string{"why"}),
		queueCapacity: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_sink_queue_capacity_rows", Help: "Rows the pipeline admits at most (sink.queue_rows); compare sluice_sink_queued_rows.",
		}),
		overBound: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_buckets_partitions_over_bound_total",
			Help: "Catalogue entries loaded that claim more rows or bytes than buckets.max_rows or buckets.max_bytes.",
		}),
		splitsMax: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_buckets_split_partitions_max",
			Help: "Most split partitions this gateway holds for one series-day of the newest UTC day it has written.",
		}),
		splitsLimit: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_buckets_split_partitions_limit",
			Help: "Split partitions one gateway can open for one series-day; past it the series-day's rows are refused.",
		}),
		commitDelays: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_sink_commit_delays_total",
			Help: "Batches the flusher held for up to sink.commit_delay for more requests: a commit was in flight and, at the recent arrival rate, sink.commit_siblings or more requests were due within the delay.",
		}),
	}
	m.splitsLimit.Set(buckets.MaxSplits)
	if reg != nil {
		reg.MustRegister(m.rows, m.commits, m.commitErrors, m.commitSeconds, m.batchRows, m.queued, m.busy, m.auditDuplicates, m.auditConflicts, m.seriesDays, m.settled, m.catalogueReads, m.entries,
			m.queueCapacity, m.overBound, m.splitsMax, m.splitsLimit, m.commitDelays)
	}
	return m
}
