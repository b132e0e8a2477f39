//! The free blocks of one pool of the caching allocator ([`FreeSet`]):
//! exact size classes with a bitmap up to 2 MiB, a `BTreeSet` above, in the
//! order PyTorch's `std::set` of blocks keeps them.

use super::caching::{Key, MIN_BLOCK, SMALL_BUFFER};
use std::collections::BTreeSet;

/// Free blocks up to this size sit in exact size classes (the small pool's
/// segment size: every small-pool block, and the rare small large-pool one).
pub(crate) const CLASS_MAX: usize = SMALL_BUFFER;
/// Number of size classes: one per multiple of [`MIN_BLOCK`] up to [`CLASS_MAX`].
pub(crate) const NCLASS: usize = CLASS_MAX / MIN_BLOCK;
/// A class list switches from a sorted `Vec` to a `BTreeSet` at this length,
/// so many free blocks of one size never make an insert linear.
pub(crate) const CLASS_VEC_MAX: usize = 64;

/// The free blocks of one pool, ordered by [`Key`] `(stream, size, addr, id)`
/// exactly as a `BTreeSet<Key>` (PyTorch's `std::set`) would be: a best fit is
/// the first key at or above `(stream, size)`.
///
/// Blocks up to [`CLASS_MAX`] bytes live in exact size classes per stream: a
/// two-level bitmap finds the smallest non-empty class at or above a request
/// in a few instructions, and each class keeps its blocks by address. In the
/// steady state of a loop that makes and drops tensors, every operation is a
/// few bit operations and a push or pop on a short list, with no allocation.
/// Larger blocks (and any size that is not a multiple of [`MIN_BLOCK`]) live
/// in a `BTreeSet`; every class size is below every size kept there, so the
/// classes are searched first.
#[derive(Default)]
pub(crate) struct FreeSet {
    classes: Vec<(u64, SizeClasses)>,
    big: BTreeSet<Key>,
}

/// The size classes of one stream.
pub(crate) struct SizeClasses {
    /// Bit `w` is set when `words[w]` is not 0.
    summary: u64,
    /// Bit `b` of `words[w]` is set when class `64 w + b` is not empty.
    words: [u64; NCLASS / 64],
    /// Class `c` holds blocks of `(c + 1) * MIN_BLOCK` bytes.
    lists: Vec<ClassList>,
}

/// The `(addr, id)` of the free blocks of one size.
pub(crate) enum ClassList {
    /// Sorted in descending order: the best (lowest address) is last.
    Vec(Vec<(usize, u32)>),
    /// Ascending.
    Tree(BTreeSet<(usize, u32)>),
}

impl ClassList {
    #[cfg(test)]
    pub(crate) fn best(&self) -> Option<(usize, u32)> {
        match self {
            ClassList::Vec(v) => v.last().copied(),
            ClassList::Tree(t) => t.first().copied(),
        }
    }
    /// Removes and returns the best entry.
    #[inline]
    pub(crate) fn pop_best(&mut self) -> Option<(usize, u32)> {
        match self {
            ClassList::Vec(v) => v.pop(),
            ClassList::Tree(t) => {
                let e = t.pop_first();
                if t.is_empty() {
                    *self = ClassList::Vec(Vec::new());
                }
                e
            }
        }
    }
    #[inline]
    pub(crate) fn insert(&mut self, e: (usize, u32)) {
        match self {
            // Fast path: below every entry (or the first one), so it goes last.
            ClassList::Vec(v) if v.last().is_none_or(|&l| e < l) && v.len() < CLASS_VEC_MAX => {
                v.push(e)
            }
            ClassList::Vec(v) if v.len() < CLASS_VEC_MAX => {
                let pos = v.partition_point(|&x| x > e);
                if v.get(pos) != Some(&e) {
                    v.insert(pos, e);
                }
            }
            ClassList::Vec(v) => {
                let mut t: BTreeSet<(usize, u32)> = v.drain(..).collect();
                t.insert(e);
                *self = ClassList::Tree(t);
            }
            ClassList::Tree(t) => {
                t.insert(e);
            }
        }
    }
    #[inline]
    pub(crate) fn remove(&mut self, e: (usize, u32)) -> bool {
        match self {
            ClassList::Vec(v) if v.last() == Some(&e) => {
                v.pop();
                true
            }
            ClassList::Vec(v) => {
                let pos = v.partition_point(|&x| x > e);
                let found = v.get(pos) == Some(&e);
                if found {
                    v.remove(pos);
                }
                found
            }
            ClassList::Tree(t) => {
                let found = t.remove(&e);
                if t.is_empty() {
                    *self = ClassList::Vec(Vec::new());
                }
                found
            }
        }
    }
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        match self {
            ClassList::Vec(v) => v.is_empty(),
            ClassList::Tree(t) => t.is_empty(),
        }
    }
    pub(crate) fn iter(&self) -> Box<dyn Iterator<Item = (usize, u32)> + '_> {
        match self {
            ClassList::Vec(v) => Box::new(v.iter().copied()),
            ClassList::Tree(t) => Box::new(t.iter().copied()),
        }
    }
}

impl SizeClasses {
    pub(crate) fn new() -> Self {
        SizeClasses {
            summary: 0,
            words: [0; NCLASS / 64],
            lists: (0..NCLASS).map(|_| ClassList::Vec(Vec::new())).collect(),
        }
    }

    /// The smallest non-empty class at or above `c`.
    #[inline]
    pub(crate) fn first_class_from(&self, c: usize) -> Option<usize> {
        let (w, b) = (c / 64, c % 64);
        let m = self.words[w] & (u64::MAX << b);
        if m != 0 {
            return Some(w * 64 + m.trailing_zeros() as usize);
        }
        let above = if w + 1 >= 64 {
            0
        } else {
            self.summary & (u64::MAX << (w + 1))
        };
        if above == 0 {
            return None;
        }
        let w = above.trailing_zeros() as usize;
        Some(w * 64 + self.words[w].trailing_zeros() as usize)
    }

    #[inline]
    pub(crate) fn mark(&mut self, c: usize, nonempty: bool) {
        let (w, b) = (c / 64, c % 64);
        if nonempty {
            self.words[w] |= 1 << b;
            self.summary |= 1 << w;
        } else {
            self.words[w] &= !(1 << b);
            if self.words[w] == 0 {
                self.summary &= !(1 << w);
            }
        }
    }
}

/// The class of a size kept in classes, if it is one.
#[inline]
fn class_of(size: usize) -> Option<usize> {
    (size != 0 && size <= CLASS_MAX && size.is_multiple_of(MIN_BLOCK)).then(|| size / MIN_BLOCK - 1)
}

impl FreeSet {
    #[cfg(test)]
    pub(crate) fn stream(&self, stream: u64) -> Option<&SizeClasses> {
        self.classes
            .iter()
            .find(|(s, _)| *s == stream)
            .map(|(_, c)| c)
    }

    #[inline]
    pub(crate) fn stream_mut(&mut self, stream: u64) -> &mut SizeClasses {
        match self.classes.iter().position(|(s, _)| *s == stream) {
            Some(i) => &mut self.classes[i].1,
            None => self.add_stream(stream),
        }
    }

    #[cold]
    pub(crate) fn add_stream(&mut self, stream: u64) -> &mut SizeClasses {
        self.classes.push((stream, SizeClasses::new()));
        &mut self.classes.last_mut().expect("just pushed").1
    }

    /// The first key at or above `(stream, size)` on `stream`.
    #[cfg(test)]
    pub(crate) fn first_fit(&self, stream: u64, size: usize) -> Option<Key> {
        if size <= CLASS_MAX
            && let Some(sc) = self.stream(stream)
        {
            let c0 = size.max(1).div_ceil(MIN_BLOCK) - 1;
            if let Some(c) = sc.first_class_from(c0) {
                let (addr, id) = sc.lists[c].best().expect("marked classes are not empty");
                return Some((stream, (c + 1) * MIN_BLOCK, addr, id));
            }
        }
        let key = self.big.range((stream, size, 0, 0)..).next().copied()?;
        (key.0 == stream).then_some(key)
    }

    /// Removes and returns the first key at or above `(stream, size)` on `stream`.
    #[inline]
    pub(crate) fn take_first_fit(&mut self, stream: u64, size: usize) -> Option<Key> {
        if size <= CLASS_MAX
            && let Some((_, sc)) = self.classes.iter_mut().find(|(s, _)| *s == stream)
        {
            let c0 = size.max(1).div_ceil(MIN_BLOCK) - 1;
            if let Some(c) = sc.first_class_from(c0) {
                let list = &mut sc.lists[c];
                let (addr, id) = list.pop_best().expect("marked classes are not empty");
                if list.is_empty() {
                    sc.mark(c, false);
                }
                return Some((stream, (c + 1) * MIN_BLOCK, addr, id));
            }
        }
        let key = self.big.range((stream, size, 0, 0)..).next().copied()?;
        if key.0 != stream {
            return None;
        }
        self.big.remove(&key);
        Some(key)
    }

    #[inline]
    pub(crate) fn insert(&mut self, key: Key) {
        match class_of(key.1) {
            Some(c) => {
                let sc = self.stream_mut(key.0);
                sc.lists[c].insert((key.2, key.3));
                sc.mark(c, true);
            }
            None => {
                self.big.insert(key);
            }
        }
    }

    #[inline]
    pub(crate) fn remove(&mut self, key: &Key) -> bool {
        match class_of(key.1) {
            Some(c) => {
                let Some(i) = self.classes.iter().position(|(s, _)| *s == key.0) else {
                    return false;
                };
                let sc = &mut self.classes[i].1;
                let found = sc.lists[c].remove((key.2, key.3));
                if sc.lists[c].is_empty() {
                    sc.mark(c, false);
                }
                found
            }
            None => self.big.remove(key),
        }
    }

    /// Every key, in ascending order.
    pub(crate) fn keys(&self) -> Vec<Key> {
        let mut all: Vec<Key> = self.big.iter().copied().collect();
        for (stream, sc) in &self.classes {
            for (c, list) in sc.lists.iter().enumerate() {
                all.extend(
                    list.iter()
                        .map(|(a, id)| (*stream, (c + 1) * MIN_BLOCK, a, id)),
                );
            }
        }
        all.sort_unstable();
        all
    }
}
