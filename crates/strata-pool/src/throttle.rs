//! A bandwidth limit shared by everything one node copies to rebuild or
//! move data, so that foreground I/O keeps most of the drives and links.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How far callers may run ahead of the rate (idle time is not saved up).
const BURST: Duration = Duration::from_millis(100);

/// A token bucket in bytes per second; `0` means no limit. The rate can be
/// changed while copies run.
#[derive(Debug)]
pub struct Throttle {
    bytes_per_sec: AtomicU64,
    /// When the bytes granted so far are paid for.
    paid_until: Mutex<Instant>,
}

impl Throttle {
    /// A limit of `bytes_per_sec` (0: none).
    pub fn new(bytes_per_sec: u64) -> Throttle {
        Throttle { bytes_per_sec: AtomicU64::new(bytes_per_sec), paid_until: Mutex::new(Instant::now()) }
    }

    /// Sets the limit (0: none); copies waiting keep their turn.
    pub fn set(&self, bytes_per_sec: u64) {
        self.bytes_per_sec.store(bytes_per_sec, Ordering::Relaxed);
    }

    /// The limit, bytes per second (0: none).
    pub fn rate(&self) -> u64 {
        self.bytes_per_sec.load(Ordering::Relaxed)
    }

    /// How long a caller about to move `bytes` must wait, at `now`.
    fn reserve(&self, bytes: u64, now: Instant) -> Duration {
        let rate = self.rate();
        if rate == 0 {
            return Duration::ZERO;
        }
        let cost = Duration::from_secs_f64(bytes as f64 / rate as f64);
        let mut paid = self.paid_until.lock().unwrap_or_else(|e| e.into_inner());
        let start = (*paid).max(now);
        *paid = start + cost;
        paid.saturating_duration_since(now + BURST)
    }

    /// Waits until `bytes` more may be moved.
    pub async fn take(&self, bytes: u64) {
        let wait = self.reserve(bytes, Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_limit_never_waits() {
        let t = Throttle::new(0);
        assert_eq!(t.reserve(1 << 40, Instant::now()), Duration::ZERO);
    }

    #[test]
    fn a_steady_stream_waits_its_cost_past_the_burst() {
        let t = Throttle::new(100 << 20); // 100 MiB/s
        let now = Instant::now();
        // The first 100 ms worth passes at once, from the saved-up burst.
        let mut waited = Duration::ZERO;
        for _ in 0..10 {
            waited = t.reserve(1 << 20, now);
        }
        assert_eq!(waited, Duration::ZERO, "10 MiB fits the 100 ms burst");
        // 100 MiB more at the same instant owes one second.
        for _ in 0..100 {
            waited = t.reserve(1 << 20, now);
        }
        let want = Duration::from_secs(1);
        assert!(waited.abs_diff(want) < Duration::from_millis(2), "{waited:?}");
    }

    #[test]
    fn idle_time_is_not_saved_beyond_the_burst() {
        let t = Throttle::new(10 << 20);
        let start = Instant::now();
        let later = start + Duration::from_secs(60);
        // A minute idle buys only the burst: 1 MiB passes, the next owes.
        assert_eq!(t.reserve(1 << 20, later), Duration::ZERO);
        let w = t.reserve(1 << 20, later);
        assert!(w.abs_diff(Duration::from_millis(100)) < Duration::from_millis(2), "{w:?}");
    }

    #[test]
    fn a_new_rate_applies_to_the_next_reservation() {
        let t = Throttle::new(1 << 20);
        t.set(0);
        assert_eq!(t.reserve(1 << 30, Instant::now()), Duration::ZERO);
        assert_eq!(t.rate(), 0);
    }
}
