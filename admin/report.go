package admin

import (
	"net/http"
	"strconv"
	"time"

	"github.com/idempotency-proxy/idempotency-proxy/internal/adoption"
)

// defaultReportWindow is the window of GET /admin/report without ?window=.
const defaultReportWindow = 24 * time.Hour

// getReport answers GET /admin/report?window=D: the adoption report of
// this process over the last D (docs/operating.md, "The adoption report").
func (h *Handler) getReport(w http.ResponseWriter, r *http.Request) {
	if h.opts.Report == nil {
		h.unsupported(w, opReport)
		return
	}
	window := defaultReportWindow
	if v := r.URL.Query().Get("window"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			h.badRequest(w, opReport, "window: want a positive duration such as 1h or 24h, got "+strconv.Quote(v))
			return
		}
		if d < adoption.Bucket {
			h.badRequest(w, opReport, "window: counts are kept per minute, so the smallest window is "+adoption.Bucket.String()+", got "+strconv.Quote(v))
			return
		}
		window = d
	}
	h.metrics.count(opReport, resultOK)
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, h.opts.Report(window))
}
