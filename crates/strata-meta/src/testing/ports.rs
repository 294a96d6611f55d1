//! Loopback ports for test servers that the kernel will not hand out to
//! anyone else.
//!
//! Binding port 0 and releasing it picks from the ephemeral range
//! (`net.ipv4.ip_local_port_range`, 32768-60999 by default), the same range
//! every outgoing connection's source port comes from. A test cluster makes
//! hundreds of connections, so a port chosen that way is often taken by a
//! node's own fabric connection before the next node binds it ("Address
//! already in use", seen in CI). Ports here come from below that range, from
//! a counter shared by every test in the process (so two tests running at
//! once never get the same one), and each is checked by binding it.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

/// First and one-past-last port handed out: below the default ephemeral
/// range, above the ports that well-known services use.
const FIRST: u32 = 10_000;
const END: u32 = 32_000;

/// Next port to try, as an offset from [`FIRST`]. Starts at a place that
/// depends on the process id, so test binaries running at the same time
/// (a soak beside a test run) start far apart.
static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);

fn next_candidate() -> u16 {
    let span = END - FIRST;
    let _ = NEXT.compare_exchange(u32::MAX, (std::process::id() * 397) % span, Ordering::Relaxed, Ordering::Relaxed);
    let offset = NEXT.fetch_add(1, Ordering::Relaxed) % span;
    // FIRST + offset < END <= u16::MAX.
    u16::try_from(FIRST + offset).unwrap_or(FIRST as u16)
}

/// `n` distinct loopback ports that were free when chosen and that no
/// other caller in this process will be given, from outside the ephemeral
/// range. Panics (this is test code) if the whole range is busy.
pub fn loopback_ports(n: usize) -> Vec<u16> {
    let mut held = Vec::with_capacity(n);
    let mut tries = 0;
    while held.len() < n {
        tries += 1;
        assert!(tries < (END - FIRST) as usize, "no free loopback port between {FIRST} and {END}");
        let port = next_candidate();
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) {
            held.push(listener);
        }
    }
    held.iter().map(|l| l.local_addr().expect("a bound listener has an address").port()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_and_outside_the_ephemeral_range() {
        let mut ports = loopback_ports(50);
        ports.extend(loopback_ports(50));
        let mut sorted = ports.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), ports.len(), "a port was handed out twice: {ports:?}");
        assert!(ports.iter().all(|&p| (FIRST as u16..END as u16).contains(&p)), "{ports:?}");
    }

    #[test]
    fn a_port_someone_listens_on_is_skipped() {
        let first = loopback_ports(1)[0];
        let _busy = TcpListener::bind(("127.0.0.1", first + 1));
        let next = loopback_ports(1)[0];
        assert_ne!(next, first + 1);
    }
}
