//! The statistics kept by each allocator, and the summary table.

use crate::bytes::fmt_bytes;
use crate::device::Device;

/// Which pool a block belongs to.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Pool {
    /// Requests up to 1 MiB, served from 2 MiB segments.
    Small,
    /// Larger requests.
    Large,
}

/// One statistic: its current value, its peak, and the running totals of
/// increases (`allocated`) and decreases (`freed`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stat {
    /// Current value.
    pub current: i64,
    /// Highest value since start or the last peak reset.
    pub peak: i64,
    /// Sum of all increases.
    pub allocated: u64,
    /// Sum of all decreases.
    pub freed: u64,
}

impl Stat {
    #[inline]
    fn add(&mut self, v: i64) {
        self.current += v;
        self.allocated += v as u64;
        self.peak = self.peak.max(self.current);
    }
    #[inline]
    fn sub(&mut self, v: i64) {
        self.current -= v;
        self.freed += v as u64;
    }
}

/// A statistic for all pools together and for each pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatTriple {
    /// Both pools.
    pub all: Stat,
    /// The small pool.
    pub small: Stat,
    /// The large pool.
    pub large: Stat,
}

impl StatTriple {
    #[inline]
    pub(crate) fn add(&mut self, pool: Pool, v: i64) {
        self.all.add(v);
        self.pool(pool).add(v);
    }
    #[inline]
    pub(crate) fn sub(&mut self, pool: Pool, v: i64) {
        self.all.sub(v);
        self.pool(pool).sub(v);
    }
    #[inline]
    fn pool(&mut self, pool: Pool) -> &mut Stat {
        match pool {
            Pool::Small => &mut self.small,
            Pool::Large => &mut self.large,
        }
    }
    fn each(&mut self, f: impl Fn(&mut Stat)) {
        f(&mut self.all);
        f(&mut self.small);
        f(&mut self.large);
    }
}

/// Everything an allocator counts, as `torch.cuda.memory_stats()` does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Live blocks (count).
    pub allocation: StatTriple,
    /// Segments obtained from the system (count).
    pub segment: StatTriple,
    /// Active blocks: live, or freed but still in use by a pending stream (count).
    pub active: StatTriple,
    /// Free blocks inside split segments, which `empty_cache` cannot release (count).
    pub inactive_split: StatTriple,
    /// Bytes of live blocks (rounded sizes).
    pub allocated_bytes: StatTriple,
    /// Bytes of segments held from the system.
    pub reserved_bytes: StatTriple,
    /// Bytes of active blocks.
    pub active_bytes: StatTriple,
    /// Bytes of free blocks inside split segments.
    pub inactive_split_bytes: StatTriple,
    /// Bytes requested by callers (before rounding).
    pub requested_bytes: StatTriple,
    /// Allocations that had to release the cache and retry.
    pub num_alloc_retries: u64,
    /// Allocations that failed with out-of-memory.
    pub num_ooms: u64,
    /// Segments obtained from the system (malloc / cuMemAlloc calls).
    pub num_sys_alloc: u64,
    /// Segments given back to the system.
    pub num_sys_free: u64,
    /// The cap on reserved bytes, if any.
    pub limit: Option<usize>,
}

impl MemoryStats {
    fn triples(&mut self) -> [&mut StatTriple; 9] {
        [
            &mut self.allocation,
            &mut self.segment,
            &mut self.active,
            &mut self.inactive_split,
            &mut self.allocated_bytes,
            &mut self.reserved_bytes,
            &mut self.active_bytes,
            &mut self.inactive_split_bytes,
            &mut self.requested_bytes,
        ]
    }
    pub(crate) fn reset_peak(&mut self) {
        for t in self.triples() {
            t.each(|s| s.peak = s.current);
        }
    }
    pub(crate) fn reset_accumulated(&mut self) {
        for t in self.triples() {
            t.each(|s| {
                s.allocated = 0;
                s.freed = 0;
            });
        }
        self.num_alloc_retries = 0;
        self.num_ooms = 0;
        self.num_sys_alloc = 0;
        self.num_sys_free = 0;
    }
}

/// One line of the summary box, between its outer `|`s.
enum Line {
    /// A horizontal rule of this character.
    Rule(char),
    /// Left-aligned text, padded to the box width.
    Text(String),
    /// Centred text.
    Center(String),
}

/// The `memory_summary` table: every line has the same width (the widest
/// content decides it), so the borders line up.
pub(crate) fn summary(device: Device, s: &MemoryStats) -> String {
    let row = |name: &str, v: [String; 4]| {
        format!(
            " {:<24}| {:>11} | {:>11} | {:>11} | {:>11} ",
            name, v[0], v[1], v[2], v[3]
        )
    };
    let mut lines = vec![
        Line::Rule('='),
        Line::Center(format!("tensorscope memory summary, device {device}")),
        Line::Rule('-'),
    ];
    let limit = s.limit.map(fmt_bytes).unwrap_or_else(|| "none".into());
    lines.push(Line::Text(format!(
        "  OOMs: {:<8} retries: {:<8} system allocs: {:<8} limit: {}",
        s.num_ooms, s.num_alloc_retries, s.num_sys_alloc, limit
    )));
    lines.push(Line::Rule('='));
    lines.push(Line::Text(row(
        "Metric",
        ["Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed"].map(String::from),
    )));
    lines.push(Line::Rule('-'));
    let bytes = |v: i64| fmt_bytes(v.max(0) as usize);
    let rows: [(&str, &StatTriple, bool); 9] = [
        ("Allocated memory", &s.allocated_bytes, true),
        ("Active memory", &s.active_bytes, true),
        ("Requested memory", &s.requested_bytes, true),
        ("Reserved memory", &s.reserved_bytes, true),
        ("Non-releasable memory", &s.inactive_split_bytes, true),
        ("Allocations", &s.allocation, false),
        ("Active allocs", &s.active, false),
        ("Reserved segments", &s.segment, false),
        ("Non-releasable allocs", &s.inactive_split, false),
    ];
    for (name, t, is_bytes) in rows {
        for (label, st) in [
            (name, &t.all),
            ("  from large pool", &t.large),
            ("  from small pool", &t.small),
        ] {
            let v = if is_bytes {
                [
                    bytes(st.current),
                    bytes(st.peak),
                    fmt_bytes(st.allocated as usize),
                    fmt_bytes(st.freed as usize),
                ]
            } else {
                [
                    st.current.to_string(),
                    st.peak.to_string(),
                    st.allocated.to_string(),
                    st.freed.to_string(),
                ]
            };
            lines.push(Line::Text(row(label, v)));
        }
        lines.push(Line::Rule('-'));
    }
    *lines.last_mut().expect("rows were pushed") = Line::Rule('=');
    let w = lines
        .iter()
        .map(|l| match l {
            Line::Text(t) | Line::Center(t) => t.chars().count(),
            Line::Rule(_) => 0,
        })
        .max()
        .unwrap_or(0)
        .max(75);
    let mut out = String::new();
    for l in &lines {
        match l {
            Line::Rule(c) => out += &format!("|{}|\n", c.to_string().repeat(w)),
            Line::Text(t) => out += &format!("|{t:<w$}|\n"),
            Line::Center(t) => out += &format!("|{t:^w$}|\n"),
        }
    }
    out
}
