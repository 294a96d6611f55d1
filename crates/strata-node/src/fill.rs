//! How full the pool is, as writes feel it.
//!
//! Placement weighs nodes by capacity, so they fill at about the same
//! rate, and a write fails with Capacity Exceeded as soon as one node of
//! its chunk is full: the pool is as full as its fullest node, not as
//! its average (a pool found failing writes at 72% raw use). So the fill
//! warnings fire on the fullest node's fill, and the room left for a
//! protection is what the pool takes before that node is full: the raw
//! space at the fullest node's fill, times the share of raw bytes that
//! protection keeps as data (1/N for `rep:N`, K/(K+M) for `ec:K+M`).
//!
//! Pure: figures in, figures and sentences out.

use strata_pool::placement::Protection;

/// One node's part: its name, raw capacity and bytes allocated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFill {
    /// The node's name.
    pub name: String,
    /// Raw capacity, bytes.
    pub capacity: u64,
    /// Bytes allocated on its drives.
    pub allocated: u64,
}

/// The pool's fill over the nodes that take new data (up in the map and
/// reporting).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fill {
    /// Raw capacity, bytes.
    pub raw: u64,
    /// Bytes allocated.
    pub allocated: u64,
    /// The fullest node and its fill, percent.
    pub fullest: Option<(String, f64)>,
}

impl Fill {
    /// The fill of `nodes`.
    pub fn of(nodes: impl IntoIterator<Item = NodeFill>) -> Fill {
        let mut f = Fill::default();
        for n in nodes {
            f.raw = f.raw.saturating_add(n.capacity);
            f.allocated = f.allocated.saturating_add(n.allocated);
            let percent = if n.capacity == 0 { 100.0 } else { n.allocated as f64 * 100.0 / n.capacity as f64 };
            if f.fullest.as_ref().is_none_or(|(_, p)| percent > *p) {
                f.fullest = Some((n.name, percent));
            }
        }
        f
    }

    /// The average fill, percent of raw capacity allocated.
    pub fn average_percent(&self) -> f64 {
        if self.raw == 0 { 0.0 } else { self.allocated as f64 * 100.0 / self.raw as f64 }
    }

    /// The fill writes feel: the fullest node's (never below the average).
    pub fn percent(&self) -> f64 {
        self.fullest.as_ref().map_or(0.0, |(_, p)| *p).max(self.average_percent()).min(100.0)
    }

    /// About how many more bytes of `protection` data the pool takes
    /// before its fullest node is full.
    pub fn room(&self, protection: Protection) -> u64 {
        let free_fraction = (100.0 - self.percent()).max(0.0) / 100.0;
        let data = protection.data_shards() as f64 / protection.width().max(1) as f64;
        (self.raw as f64 * free_fraction * data) as u64
    }

    /// The warning for the highest of `thresholds` (percent) the fill
    /// crossed, naming the room left for each of `protections`; none
    /// below the lowest.
    pub fn warnings(&self, thresholds: &[u8], protections: &[Protection]) -> Vec<String> {
        let percent = self.percent();
        let Some(t) = thresholds.iter().copied().filter(|&t| percent >= f64::from(t)).max() else {
            return Vec::new();
        };
        let who = match &self.fullest {
            Some((name, p)) if *p >= self.average_percent() => format!("its fullest node, {name}, is {p:.0}% full"),
            _ => format!("it is {percent:.0}% full"),
        };
        let room: Vec<String> =
            protections.iter().map(|&p| format!("{} of {p}", crate::human::approx_size(self.room(p)))).collect();
        let room = if room.is_empty() { String::new() } else { format!("; room for about {}", room.join(", ")) };
        vec![format!(
            "the pool is past its {t}% fill warning: {who} (average {:.0}%){room}; writes fail with Capacity \
             Exceeded once a chunk's nodes are full: add nodes or free space",
            self.average_percent()
        )]
    }

    /// The highest of `thresholds` crossed, 0 for none.
    pub fn crossed(&self, thresholds: &[u8]) -> u8 {
        let percent = self.percent();
        thresholds.iter().copied().filter(|&t| percent >= f64::from(t)).max().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn node(name: &str, capacity: u64, allocated: u64) -> NodeFill {
        NodeFill { name: name.into(), capacity, allocated }
    }

    fn p(s: &str) -> Protection {
        s.parse().unwrap()
    }

    #[test]
    fn the_pool_is_as_full_as_its_fullest_node() {
        let f = Fill::of([node("a", 10 * GIB, 9 * GIB), node("b", 10 * GIB, 5 * GIB), node("c", 10 * GIB, 7 * GIB)]);
        assert_eq!(f.average_percent().round(), 70.0);
        assert_eq!(f.percent().round(), 90.0);
        assert_eq!(f.fullest.as_ref().map(|(n, _)| n.as_str()), Some("a"));
        // 30 GiB raw at 90%: 3 GiB raw left; rep:3 keeps a third, ec:4+2
        // two thirds, rep:1 all of it.
        let room = |s| f.room(p(s)) as f64 / GIB as f64;
        assert!((room("rep:3") - 1.0).abs() < 0.01, "{}", room("rep:3"));
        assert!((room("ec:4+2") - 2.0).abs() < 0.01, "{}", room("ec:4+2"));
        assert!((room("rep:1") - 3.0).abs() < 0.01, "{}", room("rep:1"));
    }

    #[test]
    fn a_warning_fires_on_the_fullest_node_before_the_average_reaches_it() {
        // The average is 72%, below every threshold, but one node is at 96%:
        // writes to its chunks are about to fail.
        let f = Fill::of([node("n0", 10 * GIB, 9_850 << 20), node("n1", 10 * GIB, 4_800 << 20)]);
        assert!(f.average_percent() < 75.0);
        assert_eq!(f.crossed(&[75, 85, 95]), 95);
        let w = f.warnings(&[75, 85, 95], &[p("rep:3"), p("ec:4+2")]);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("95% fill warning") && w[0].contains("n0, is 96% full"), "{}", w[0]);
        assert!(w[0].contains("of rep:3") && w[0].contains("of ec:4+2"), "{}", w[0]);
    }

    #[test]
    fn no_warning_below_the_lowest_threshold_and_an_empty_pool_is_empty() {
        let f = Fill::of([node("n0", GIB, GIB / 10)]);
        assert!(f.warnings(&[75], &[p("rep:1")]).is_empty());
        assert_eq!(f.crossed(&[75]), 0);
        let empty = Fill::of([]);
        assert_eq!((empty.percent(), empty.room(p("rep:3"))), (0.0, 0));
        // A node of no capacity is full, not a division by zero.
        assert_eq!(Fill::of([node("z", 0, 0)]).percent(), 100.0);
    }
}
