//! The SMART / Health I/O counters: [`IoCounters`] for one namespace,
//! [`NamespaceIoStats`] for all of a subsystem's, and their sums
//! ([`IoTotals`]).
//!
//! Counters belong to a namespace's block device, not to a controller (see
//! [`NamespaceIoStats`] for why), so this module sits below both
//! `subsystem` (which keeps one `NamespaceIoStats` per subsystem) and
//! `controller` (which re-exports these types, their public path): it
//! imports only `namespace`.
//!
//! Invariant: the counters reported under an NSID are those of the device
//! the namespace has now; counts of a device an NSID no longer names are
//! never reported.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};

use strata_block::BlockDevice;

use crate::namespace::Namespace;

/// What the SMART / Health log counts for one namespace.
#[derive(Debug, Default)]
pub struct IoCounters {
    /// Read commands completed.
    pub read_commands: AtomicU64,
    /// Write commands completed.
    pub write_commands: AtomicU64,
    /// 512-byte units read.
    pub sectors_read: AtomicU64,
    /// 512-byte units written.
    pub sectors_written: AtomicU64,
    /// Commands that ended with a media and data integrity error.
    pub media_errors: AtomicU64,
}

impl IoCounters {
    /// Counts a completed Read of `bytes`.
    pub(crate) fn count_read(&self, bytes: u64) {
        self.read_commands.fetch_add(1, Ordering::Relaxed);
        self.sectors_read.fetch_add(bytes / 512, Ordering::Relaxed);
    }

    /// Counts a completed Write of `bytes`.
    pub(crate) fn count_write(&self, bytes: u64) {
        self.write_commands.fetch_add(1, Ordering::Relaxed);
        self.sectors_written.fetch_add(bytes / 512, Ordering::Relaxed);
    }

    /// Adds these counts into `total`.
    fn add_to(&self, total: &mut IoTotals) {
        total.read_commands += u128::from(self.read_commands.load(Ordering::Relaxed));
        total.write_commands += u128::from(self.write_commands.load(Ordering::Relaxed));
        total.sectors_read += u128::from(self.sectors_read.load(Ordering::Relaxed));
        total.sectors_written += u128::from(self.sectors_written.load(Ordering::Relaxed));
        total.media_errors += u128::from(self.media_errors.load(Ordering::Relaxed));
    }
}

/// Sums of [`IoCounters`] over some namespaces.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IoTotals {
    /// Read commands completed.
    pub read_commands: u128,
    /// Write commands completed.
    pub write_commands: u128,
    /// 512-byte units read.
    pub sectors_read: u128,
    /// 512-byte units written.
    pub sectors_written: u128,
    /// Commands that ended with a media and data integrity error.
    pub media_errors: u128,
}

/// The I/O counters of a subsystem's namespaces.
///
/// Linux nvmet reads the SMART counts from each namespace's block device
/// (`part_stat` in `nvmet_get_smart_log_nsid` / `_all`), so they do not
/// depend on which controller did the I/O or asks for the log: a host that
/// reconnects, a second path, or `nvme smart-log` run after `strata bench`
/// see everything. The counters live here, one set per namespace, and
/// follow its block device: a namespace removed and added again on the same
/// device keeps counting; an NSID reused for another device starts at
/// zero. Entries of removed namespaces stay until their NSID is reused and
/// are never reported.
#[derive(Default)]
pub struct NamespaceIoStats {
    by_nsid: RwLock<HashMap<u32, DeviceCounters>>,
}

struct DeviceCounters {
    /// Identifies the device without keeping it open; the allocation it
    /// points to cannot be reused while this exists.
    device: Weak<dyn BlockDevice>,
    counters: Arc<IoCounters>,
}

impl std::fmt::Debug for NamespaceIoStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamespaceIoStats").finish_non_exhaustive()
    }
}

impl NamespaceIoStats {
    /// The counters of `ns`, created the first time its device is seen
    /// under its NSID. Taken when the namespace is added; the I/O path
    /// then counts through its namespace entry, without a lookup here.
    pub(crate) fn counters_for(&self, ns: &Namespace) -> Arc<IoCounters> {
        let device = Arc::downgrade(&ns.device);
        let mut map = self.by_nsid.write().unwrap_or_else(|e| e.into_inner());
        let e =
            map.entry(ns.nsid).or_insert_with(|| DeviceCounters { device: device.clone(), counters: Arc::default() });
        if !e.device.ptr_eq(&device) {
            *e = DeviceCounters { device, counters: Arc::default() };
        }
        e.counters.clone()
    }

    /// The counts of `namespaces` added up.
    pub fn totals<'a>(&self, namespaces: impl IntoIterator<Item = &'a Namespace>) -> IoTotals {
        let map = self.by_nsid.read().unwrap_or_else(|e| e.into_inner());
        let mut total = IoTotals::default();
        for ns in namespaces {
            let device = Arc::downgrade(&ns.device);
            if let Some(e) = map.get(&ns.nsid).filter(|e| e.device.ptr_eq(&device)) {
                e.counters.add_to(&mut total);
            }
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::namespace::NamespaceIds;

    #[test]
    fn namespace_counters_follow_the_device_not_the_nsid() {
        let stats = NamespaceIoStats::default();
        let ids = NamespaceIds { nguid: [1; 16], uuid: [2; 16], eui64: [0; 8] };
        let dev: Arc<dyn BlockDevice> = Arc::new(strata_block::MemDevice::new(4096, 16));
        let ns = Namespace::new(1, ids, dev.clone());
        stats.counters_for(&ns).count_write(8192);
        stats.counters_for(&ns).count_read(4096);
        let t = stats.totals([&ns]);
        assert_eq!((t.write_commands, t.sectors_written, t.read_commands, t.sectors_read), (1, 16, 1, 8));
        // The same device under the same NSID again (removed and re-added):
        // the counts go on.
        let again = Namespace::new(1, ids, dev);
        assert_eq!(stats.totals([&again]), t);
        // Another device reusing the NSID starts from zero.
        let other = Namespace::new(1, ids, Arc::new(strata_block::MemDevice::new(4096, 16)));
        assert_eq!(stats.totals([&other]), IoTotals::default());
        stats.counters_for(&other).count_write(512);
        assert_eq!(stats.totals([&other]).write_commands, 1);
        assert_eq!(stats.totals([&again]), IoTotals::default(), "replaced");
    }
}
