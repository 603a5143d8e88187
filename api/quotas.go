package api

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Quotas bound what one tenant may do on one instance. A zero field is
// unbounded.
type Quotas struct {
	// CreatesPerSecond is the rate at which a tenant may create runs (a
	// token bucket of CreateBurst); past it, POST /runs answers 429
	// rate_limited with Retry-After.
	CreatesPerSecond float64
	// CreateBurst is the bucket's size (default: CreatesPerSecond, at
	// least 1).
	CreateBurst int
	// StreamsPerTenant caps the event streams a tenant has open at once on
	// this instance; past it, a new stream answers 429 rate_limited.
	StreamsPerTenant int
}

// tenantLimits keeps each tenant's bucket and open streams.
type tenantLimits struct {
	q       Quotas
	mu      sync.Mutex
	buckets map[string]*rate.Limiter
	streams map[string]int
}

// maxBuckets bounds the buckets kept; past it they start over (full).
const maxBuckets = 100_000

func newTenantLimits(q Quotas) *tenantLimits {
	if q.CreatesPerSecond > 0 && q.CreateBurst <= 0 {
		q.CreateBurst = max(1, int(math.Ceil(q.CreatesPerSecond)))
	}
	return &tenantLimits{q: q, buckets: map[string]*rate.Limiter{}, streams: map[string]int{}}
}

// allowCreate takes a token of tenant's bucket, or says how long until
// one is there.
func (l *tenantLimits) allowCreate(tenant string, now time.Time) (ok bool, retry time.Duration) {
	if l.q.CreatesPerSecond <= 0 {
		return true, 0
	}
	l.mu.Lock()
	b := l.buckets[tenant]
	if b == nil {
		if len(l.buckets) >= maxBuckets {
			clear(l.buckets)
		}
		b = rate.NewLimiter(rate.Limit(l.q.CreatesPerSecond), l.q.CreateBurst)
		l.buckets[tenant] = b
	}
	l.mu.Unlock()
	r := b.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// openStream counts a stream of tenant, unless it has as many open as it
// may; done must be called when the stream ends.
func (l *tenantLimits) openStream(tenant string) (done func(), ok bool) {
	if l.q.StreamsPerTenant <= 0 {
		return func() {}, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.streams[tenant] >= l.q.StreamsPerTenant {
		return nil, false
	}
	l.streams[tenant]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.streams[tenant]--; l.streams[tenant] <= 0 {
				delete(l.streams, tenant)
			}
		})
	}, true
}

// rateLimited is the 429 of a quota, with Retry-After in whole seconds.
func rateLimited(w http.ResponseWriter, retry time.Duration, detail string) error {
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(retry.Seconds())))))
	return newError(http.StatusTooManyRequests, CodeRateLimited, "Rate limited", detail)
}

// limitCreates applies the tenant's run creation rate to POST /runs.
func (s *server) limitCreates(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ok, retry := s.limits.allowCreate(TenantFromContext(r.Context()), time.Now()); !ok {
			s.fail(w, r, rateLimited(w, retry, "this tenant creates runs faster than its quota allows; retry after Retry-After seconds"))
			return
		}
		next.ServeHTTP(w, r)
	})
}
