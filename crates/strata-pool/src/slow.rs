//! Waits that say so when they last: an owner's exclusive locks and its
//! chores log a warning once they have waited [`SLOW_WAIT`], again every
//! [`SLOW_WAIT`] after, and once more when they end. A volume whose resync
//! or move stopped shows in the log with what it waits for, rather than
//! going silent.

use std::future::Future;
use std::time::Duration;

/// How long a wait goes before it is logged.
pub const SLOW_WAIT: Duration = Duration::from_secs(30);

/// Awaits `fut`, logging (with `what`) when it has taken longer than
/// [`SLOW_WAIT`], every [`SLOW_WAIT`] after that, and when it ends after
/// having been logged. Dropping the future drops `fut`.
pub async fn logged_if_slow<F: Future>(what: &str, fut: F) -> F::Output {
    let began = tokio::time::Instant::now();
    let mut fut = std::pin::pin!(fut);
    let mut logged = false;
    loop {
        tokio::select! {
            out = &mut fut => {
                if logged {
                    tracing::info!(waited_secs = began.elapsed().as_secs(), "{what}: done after a long wait");
                }
                return out;
            }
            () = tokio::time::sleep(SLOW_WAIT) => {
                logged = true;
                tracing::warn!(waited_secs = began.elapsed().as_secs(), "{what}: still waiting");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_slow_wait_still_returns_its_output_and_a_quick_one_is_untouched() {
        assert_eq!(logged_if_slow("quick", async { 7 }).await, 7);
        let slow = async {
            tokio::time::sleep(SLOW_WAIT * 3).await;
            "done"
        };
        let began = tokio::time::Instant::now();
        assert_eq!(logged_if_slow("slow", slow).await, "done");
        assert!(began.elapsed() >= SLOW_WAIT * 3 && began.elapsed() < SLOW_WAIT * 4, "the wait is not cut short");
    }
}
