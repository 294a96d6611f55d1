//! Client CPU time, from `getrusage(RUSAGE_SELF)`. The only `unsafe` in
//! the crate, kept in this leaf behind [`cpu_times`].

use std::mem::MaybeUninit;
use std::time::Duration;

/// User and system CPU time used by the process so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CpuTimes {
    pub(crate) user: Duration,
    pub(crate) sys: Duration,
}

fn tv(t: libc::timeval) -> Duration {
    Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
        + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
}

/// The process's CPU times, or `None` if `getrusage` fails (it cannot for
/// `RUSAGE_SELF` with a valid pointer, but the caller copes).
pub(crate) fn cpu_times() -> Option<CpuTimes> {
    let mut ru = MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: `ru` is a valid, writable `rusage`-sized buffer for the
    // duration of the call; getrusage writes only into it.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: getrusage returned 0, so it filled in the whole struct.
    let ru = unsafe { ru.assume_init() };
    Some(CpuTimes { user: tv(ru.ru_utime), sys: tv(ru.ru_stime) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_moves_forward() {
        let a = cpu_times().unwrap();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        std::hint::black_box(x);
        let b = cpu_times().unwrap();
        assert!(b.user + b.sys >= a.user + a.sys);
    }
}
