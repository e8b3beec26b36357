//! A set of page numbers stored as disjoint, coalesced ranges.

use std::collections::BTreeMap;

use crate::format::records::PageRange;
use crate::types::PageId;

/// Disjoint, non-adjacent ranges `start -> length`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeSet {
    map: BTreeMap<u64, u64>,
    pages: u64,
}

impl RangeSet {
    /// An empty set.
    pub fn new() -> RangeSet {
        RangeSet::default()
    }

    /// Total pages in the set.
    pub fn pages(&self) -> u64 {
        self.pages
    }

    /// Number of (coalesced) ranges.
    pub fn runs(&self) -> usize {
        self.map.len()
    }

    /// True if every page of `[start, start+len)` is in the set (a range
    /// past the last page id, which a pointer in the file may name, is not).
    pub fn contains_all(&self, start: u64, len: u64) -> bool {
        let Some(end) = start.checked_add(len) else {
            return false;
        };
        match self.map.range(..=start).next_back() {
            Some((&s, &l)) => s + l >= end,
            None => false,
        }
    }

    /// The range of the set holding `page`, as `(start, length)`.
    pub fn containing(&self, page: u64) -> Option<(u64, u64)> {
        let (&s, &l) = self.map.range(..=page).next_back()?;
        (s + l > page).then_some((s, l))
    }

    /// True if any page of `[start, start+len)` is in the set.
    pub fn intersects(&self, start: u64, len: u64) -> bool {
        if let Some((&s, &l)) = self.map.range(..=start).next_back() {
            if s + l > start {
                return true;
            }
        }
        self.map
            .range(start..start.saturating_add(len))
            .next()
            .is_some()
    }

    /// Adds `[start, start+len)`, which must not intersect the set.
    /// Returns false (and changes nothing) if it does.
    pub fn insert(&mut self, start: u64, len: u64) -> bool {
        if len == 0 {
            return true;
        }
        if self.intersects(start, len) {
            return false;
        }
        let mut s = start;
        let mut l = len;
        if let Some((&ps, &pl)) = self.map.range(..start).next_back() {
            if ps + pl == start {
                self.map.remove(&ps);
                s = ps;
                l += pl;
            }
        }
        if let Some(nl) = self.map.remove(&(start + len)) {
            l += nl;
        }
        self.map.insert(s, l);
        self.pages += len;
        true
    }

    /// Removes `[start, start+len)`, which must be wholly in the set.
    /// Returns false (and changes nothing) if it is not.
    pub fn remove(&mut self, start: u64, len: u64) -> bool {
        if len == 0 {
            return true;
        }
        let Some((&s, &l)) = self.map.range(..=start).next_back() else {
            return false;
        };
        if s + l < start + len {
            return false;
        }
        self.map.remove(&s);
        if start > s {
            self.map.insert(s, start - s);
        }
        if s + l > start + len {
            self.map.insert(start + len, s + l - (start + len));
        }
        self.pages -= len;
        true
    }

    /// Removes every page of `[start, start+len)` that is in the set (the
    /// rest of the range need not be). Returns the pages removed.
    pub fn remove_overlap(&mut self, start: u64, len: u64) -> u64 {
        let end = start.saturating_add(len);
        let first = (self.map.range(..start).next_back())
            .filter(|(&s, &l)| s + l > start)
            .map(|(&s, &l)| (s, l));
        let pieces: Vec<(u64, u64)> = first
            .into_iter()
            .chain(self.map.range(start..end).map(|(&s, &l)| (s, l)))
            .map(|(s, l)| (s.max(start), (s + l).min(end)))
            .collect();
        let mut removed = 0;
        for (lo, hi) in pieces {
            let ok = self.remove(lo, hi - lo);
            debug_assert!(ok, "a piece of one range of the set");
            removed += hi - lo;
        }
        removed
    }

    /// The parts of `[start, start+len)` not in the set, ascending, as
    /// `(start, length)`.
    pub fn gaps(&self, start: u64, len: u64) -> Vec<(u64, u64)> {
        let end = start.saturating_add(len);
        let first = (self.map.range(..start).next_back())
            .filter(|(&s, &l)| s + l > start)
            .map(|(&s, &l)| (s, l));
        let mut at = start;
        let mut out = Vec::new();
        for (s, l) in first
            .into_iter()
            .chain(self.map.range(start..end).map(|(&s, &l)| (s, l)))
        {
            if s > at {
                out.push((at, s - at));
            }
            at = at.max(s + l);
        }
        if at < end {
            out.push((at, end - at));
        }
        out
    }

    /// Takes `len` contiguous pages, lowest address first fit.
    pub fn take(&mut self, len: u64) -> Option<u64> {
        let start = if len == 1 {
            *self.map.keys().next()?
        } else {
            self.map.iter().find(|(_, &l)| l >= len).map(|(&s, _)| s)?
        };
        let removed = self.remove(start, len);
        debug_assert!(removed);
        Some(start)
    }

    /// Takes `len` contiguous pages lying wholly below `limit`, lowest
    /// first fit.
    pub fn take_below(&mut self, len: u64, limit: u64) -> Option<u64> {
        let start = (self.map.iter())
            .take_while(|(&s, _)| s + len <= limit)
            .find(|(_, &l)| l >= len)
            .map(|(&s, _)| s)?;
        let removed = self.remove(start, len);
        debug_assert!(removed && start + len <= limit);
        Some(start)
    }

    /// Pages of the set below page `limit`.
    pub fn pages_below(&self, limit: u64) -> u64 {
        (self.map.range(..limit))
            .map(|(&s, &l)| l.min(limit - s))
            .sum()
    }

    /// Takes, from the lowest range with at least `min` pages below
    /// `limit`, as many of them as it has there, at most `max`, from its
    /// start. Returns the start and the pages taken. What a claim under a
    /// compaction limit takes when no run of the size it wanted is left:
    /// as much of one run as it can use, not `min` pages, so a relocation
    /// does not cut the free space into one extent per page; the lowest
    /// such run, so what moves lands as low as it can.
    pub fn take_first_below(&mut self, min: u64, max: u64, limit: u64) -> Option<(u64, u64)> {
        debug_assert!(0 < min && min <= max, "take {min}..={max} pages");
        let (start, room) = (self.map.range(..limit))
            .map(|(&s, &l)| (s, l.min(limit - s)))
            .find(|&(_, room)| room >= min)?;
        let pages = room.min(max);
        let removed = self.remove(start, pages);
        debug_assert!(removed && start + pages <= limit);
        Some((start, pages))
    }

    /// The ranges, ascending.
    pub fn iter(&self) -> impl Iterator<Item = PageRange> + '_ {
        self.map.iter().map(|(&s, &l)| PageRange {
            start: PageId(s),
            pages: l,
        })
    }

    /// The ranges as a vector.
    pub fn to_vec(&self) -> Vec<PageRange> {
        self.iter().collect()
    }

    /// Adds `runs` (`(start, length)`, in any order, none intersecting the
    /// set): sorted in place, and touching runs joined, so a stretch of
    /// runs costs one update. Returns the first run (joined) the set refused as
    /// intersecting it, after adding the others.
    pub fn insert_runs(&mut self, runs: &mut [(PageId, u32)]) -> Option<(u64, u64)> {
        runs.sort_unstable_by_key(|&(p, _)| p);
        let mut refused = None;
        for (start, pages) in coalesce(runs) {
            if !self.insert(start, pages) && refused.is_none() {
                refused = Some((start, pages));
            }
        }
        refused
    }

    /// Union with another set; false if they intersect (then partially applied).
    pub fn insert_all(&mut self, other: &RangeSet) -> bool {
        other.iter().all(|r| self.insert(r.start.0, r.pages))
    }
}

/// Runs sorted by start, as `(start, length)`, with runs that touch end
/// to start joined into one. Overlapping runs stay apart (the set refuses
/// the second, as a run freed twice).
fn coalesce(sorted: &[(PageId, u32)]) -> Vec<(u64, u64)> {
    debug_assert!(sorted.windows(2).all(|w| w[0].0 <= w[1].0), "unsorted runs");
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(sorted.len());
    for &(PageId(start), pages) in sorted {
        match out.last_mut() {
            Some((s, l)) if *s + *l == start => *l += u64::from(pages),
            _ => out.push((start, u64::from(pages))),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Touching runs join; gaps and overlaps keep runs apart, so a run
    /// freed twice still reaches the set (which refuses it) on its own.
    #[test]
    fn coalesce_joins_only_runs_that_touch() {
        let runs = [
            (PageId(3), 2),
            (PageId(5), 1),
            (PageId(6), 4),
            (PageId(12), 1),
            (PageId(12), 1),
            (PageId(20), 3),
            (PageId(21), 1),
        ];
        assert_eq!(
            coalesce(&runs),
            vec![(3, 7), (12, 1), (12, 1), (20, 3), (21, 1)]
        );
        assert!(coalesce(&[]).is_empty());
        let mut set = RangeSet::new();
        let refused = coalesce(&runs)
            .into_iter()
            .filter(|&(s, l)| !set.insert(s, l))
            .count();
        assert_eq!(refused, 2, "the repeated run and the overlapping one");
        assert_eq!(set.pages(), 7 + 1 + 3);
        // The same through `insert_runs`, shuffled: the first refusal is
        // reported and the rest still go in.
        let mut shuffled = runs;
        shuffled.reverse();
        let mut set = RangeSet::new();
        assert_eq!(set.insert_runs(&mut shuffled), Some((12, 1)));
        assert_eq!(set.pages(), 7 + 1 + 3);
        assert_eq!(set.runs(), 3);
        assert_eq!(RangeSet::new().insert_runs(&mut []), None);
    }

    /// Frees are checked against sets of ranges before anything else
    /// looks at them, and a freed run's start comes from a pointer in the
    /// file: a range past the last page id is in no set.
    #[test]
    fn ranges_past_the_last_page_id_are_outside() {
        let mut set = RangeSet::new();
        assert!(set.insert(10, 5));
        assert!(set.insert(u64::MAX - 3, 3));
        assert!(!set.contains_all(u64::MAX - 1, 2));
        assert!(!set.contains_all(u64::MAX, 1));
        assert!(set.contains_all(u64::MAX - 3, 2));
        assert!(set.intersects(u64::MAX - 1, 2));
        assert!(!set.intersects(20, 100));
        assert!(set.intersects(20, u64::MAX));
    }

    #[test]
    fn taking_the_first_below_a_limit_takes_what_the_run_has() {
        let mut set = RangeSet::new();
        assert!(set.insert(10, 3));
        assert!(set.insert(20, 6));
        assert!(set.insert(40, 50)); // only 10 pages of it below 50
        assert_eq!(set.pages_below(50), 19);
        assert_eq!(set.pages_below(21), 4, "a range cut by the limit");
        assert_eq!(set.take_first_below(4, 100, 50), Some((20, 6)));
        assert_eq!(set.take_first_below(1, 2, 50), Some((10, 2)));
        assert_eq!(set.take_first_below(5, 100, 50), Some((40, 10)));
        assert_eq!(set.take_first_below(2, 9, 50), None, "1 page left at 12");
        assert_eq!(set.take_first_below(1, 9, 50), Some((12, 1)));
        assert_eq!(set.pages(), 40, "what lies past the limit stays");
        assert_eq!(set.take_first_below(1, 9, 40), None);
    }

    #[test]
    fn matches_a_page_set_model() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut set = RangeSet::new();
        let mut model = BTreeSet::new();
        for _ in 0..20_000 {
            let start = rng.gen_range(0..500u64);
            let len = rng.gen_range(1..8u64);
            let all_in = (start..start + len).all(|p| model.contains(&p));
            let none_in = (start..start + len).all(|p| !model.contains(&p));
            assert_eq!(set.contains_all(start, len), all_in);
            assert_eq!(set.intersects(start, len), !none_in);
            let dice = rng.gen_range(0..10);
            if dice < 5 {
                assert_eq!(set.insert(start, len), none_in);
                if none_in {
                    model.extend(start..start + len);
                }
            } else if dice == 9 {
                let wide = rng.gen_range(1..40u64);
                let gaps: Vec<u64> = (set.gaps(start, wide).into_iter())
                    .flat_map(|(s, l)| s..s + l)
                    .collect();
                let want: Vec<u64> = (start..start + wide)
                    .filter(|p| !model.contains(p))
                    .collect();
                assert_eq!(gaps, want, "gaps of {start}+{wide}");
                let held = (start..start + wide).filter(|p| model.contains(p)).count();
                assert_eq!(set.remove_overlap(start, wide), held as u64);
                for p in start..start + wide {
                    model.remove(&p);
                }
                assert!(!set.intersects(start, wide));
            } else {
                assert_eq!(set.remove(start, len), all_in);
                if all_in {
                    for p in start..start + len {
                        model.remove(&p);
                    }
                }
            }
            assert_eq!(set.pages(), model.len() as u64);
        }
        let ranges = set.to_vec();
        for w in ranges.windows(2) {
            assert!(w[0].end() < w[1].start.0, "ranges must be coalesced");
        }
    }

    #[test]
    fn take_is_first_fit() {
        let mut s = RangeSet::new();
        s.insert(10, 2);
        s.insert(20, 5);
        assert_eq!(s.take(3), Some(20));
        assert_eq!(s.take(1), Some(10));
        assert_eq!(s.take(9), None);
        assert_eq!(s.pages(), 3);
    }
}
