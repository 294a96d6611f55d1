//! The IOPS limit: one token bucket shared by every job, in the form of
//! the generic cell rate algorithm (GCRA), so that it is a single atomic
//! word and no job ever spins.
//!
//! The state is the theoretical arrival time `tat` of the next I/O, in
//! nanoseconds since the limiter's start. Taking `n` tokens at `now` moves
//! `tat` from `max(tat, now - burst)` forward by `n` periods, provided
//! that does not pass `now`; otherwise the caller learns when the next
//! token is due and sleeps until then. Over any run the grants add up to
//! at most `rate * elapsed + burst / period`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Tokens granted at once after an idle spell: 10 ms worth of I/O.
const BURST: Duration = Duration::from_millis(10);

/// An IOPS limit shared by the jobs of one run.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    start: Instant,
    period_ns: u64,
    burst_ns: u64,
    tat: AtomicU64,
}

/// The answer to [`RateLimiter::acquire`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grant {
    /// Issue this many I/Os now (at least 1).
    Go(u64),
    /// Nothing now; the next token is due at this instant.
    WaitUntil(Instant),
}

impl RateLimiter {
    /// A limit of `iops` (at least 1) from `start` on.
    pub(crate) fn new(start: Instant, iops: u64) -> RateLimiter {
        let period_ns = (1_000_000_000 / iops.max(1)).max(1);
        // At least one token, so that a low rate still lets I/O through.
        let burst_ns = (BURST.as_nanos() as u64).max(period_ns);
        RateLimiter { start, period_ns, burst_ns, tat: AtomicU64::new(0) }
    }

    /// Takes up to `want` tokens (`want > 0`) at `now`.
    pub(crate) fn acquire(&self, want: u64, now: Instant) -> Grant {
        let now_ns = now.saturating_duration_since(self.start).as_nanos() as u64;
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            let base = tat.max(now_ns.saturating_sub(self.burst_ns));
            let available = now_ns.saturating_sub(base) / self.period_ns;
            if available == 0 {
                return Grant::WaitUntil(self.start + Duration::from_nanos(base + self.period_ns));
            }
            let n = available.min(want);
            match self.tat.compare_exchange_weak(tat, base + n * self.period_ns, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Grant::Go(n),
                Err(current) => tat = current,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_follow_the_rate_with_a_bounded_burst() {
        let t0 = Instant::now();
        let r = RateLimiter::new(t0, 1000);
        // Nothing at the very start: the first token is due after a period.
        assert_eq!(r.acquire(5, t0), Grant::WaitUntil(t0 + Duration::from_millis(1)));
        // After 1 s idle, the burst (10 ms = 10 tokens) is all there is.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(r.acquire(100, t1), Grant::Go(10));
        assert!(matches!(r.acquire(1, t1), Grant::WaitUntil(_)));
        // Asking every 100 us for 2 s grants about 2000 tokens, never more
        // than rate * time + burst.
        let mut total = 0;
        for i in 0..20_000 {
            if let Grant::Go(n) = r.acquire(4, t1 + Duration::from_micros(100 * i)) {
                total += n;
            }
        }
        assert!((1990..=2010).contains(&total), "{total}");
    }
}
