//! One program memory's page table as the pager keeps it: where each page is, and the two
//! lists the default policy reads (clock as two lists, as Linux keeps it: pages on the active
//! list are in the program's memory; pages on the inactive list were taken out of it but kept
//! in a frame, and a touch brings one back cheaply, which is how a page shows it is still used
//! when this Linux gives a user-space pager no accessed bits).
//!
//! Pure bookkeeping: the pager makes the moves, this records them.

use crate::swap::Swapped;
use std::collections::VecDeque;

/// Where one page of program memory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Page {
    /// Never touched, or given up while it held only zeros: a touch fills it with zeros.
    Absent,
    /// In the program's memory (on the active list, entry `seq`).
    Resident { seq: u32 },
    /// Out of the program's memory into staging slot `staged`, still in a frame (on the
    /// inactive list, entry `seq`).
    Inactive { staged: u32, seq: u32 },
    /// In swap.
    Swapped(Swapped),
}

/// The pages of one memory and its two lists.
#[derive(Default)]
pub struct Table {
    pages: Vec<Page>,
    /// (page, seq), oldest first; entries whose page moved on since are skipped.
    active: VecDeque<(u32, u32)>,
    inactive: VecDeque<(u32, u32)>,
    n_active: u64,
    n_inactive: u64,
    n_swapped: u64,
    next_seq: u32,
}

impl Table {
    /// Pages the memory has now.
    pub fn len(&self) -> usize {
        self.pages.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    /// The memory grew to `pages` (new pages are absent).
    pub fn grow(&mut self, pages: usize) {
        if pages > self.pages.len() {
            self.pages.resize(pages, Page::Absent);
        }
    }

    pub fn get(&self, page: u32) -> Page {
        self.pages[page as usize]
    }

    /// Frames the memory holds: pages in its memory and pages in staging.
    pub fn frames(&self) -> u64 {
        self.n_active + self.n_inactive
    }

    pub fn active(&self) -> u64 {
        self.n_active
    }

    pub fn inactive(&self) -> u64 {
        self.n_inactive
    }

    pub fn swapped(&self) -> u64 {
        self.n_swapped
    }

    fn seq(&mut self) -> u32 {
        self.next_seq = self.next_seq.wrapping_add(1);
        self.next_seq
    }

    fn leave(&mut self, page: u32) {
        match self.pages[page as usize] {
            Page::Absent => {}
            Page::Resident { .. } => self.n_active -= 1,
            Page::Inactive { .. } => self.n_inactive -= 1,
            Page::Swapped(_) => self.n_swapped -= 1,
        }
    }

    /// The page is in the program's memory now, newest on the active list.
    pub fn set_resident(&mut self, page: u32) {
        self.leave(page);
        let seq = self.seq();
        self.pages[page as usize] = Page::Resident { seq };
        self.active.push_back((page, seq));
        self.n_active += 1;
        self.compact();
    }

    /// The page went out to staging slot `staged`, newest on the inactive list.
    pub fn set_inactive(&mut self, page: u32, staged: u32) {
        self.leave(page);
        let seq = self.seq();
        self.pages[page as usize] = Page::Inactive { staged, seq };
        self.inactive.push_back((page, seq));
        self.n_inactive += 1;
        self.compact();
    }

    pub fn set_swapped(&mut self, page: u32, at: Swapped) {
        self.leave(page);
        self.pages[page as usize] = Page::Swapped(at);
        self.n_swapped += 1;
    }

    pub fn set_absent(&mut self, page: u32) {
        self.leave(page);
        self.pages[page as usize] = Page::Absent;
    }

    /// A resident page goes to the back of the active list (it could not be moved now).
    pub fn requeue(&mut self, page: u32) {
        if let Page::Resident { .. } = self.pages[page as usize] {
            self.n_active -= 1;
            self.set_resident(page);
        }
    }

    fn live_active(&self, (page, seq): (u32, u32)) -> bool {
        self.pages.get(page as usize) == Some(&Page::Resident { seq })
    }

    fn live_inactive(&self, (page, seq): (u32, u32)) -> bool {
        matches!(self.pages.get(page as usize), Some(&Page::Inactive { seq: s, .. }) if s == seq)
    }

    /// The oldest page on the active list.
    pub fn oldest_active(&mut self) -> Option<u32> {
        while let Some(&e) = self.active.front() {
            if self.live_active(e) {
                return Some(e.0);
            }
            self.active.pop_front();
        }
        None
    }

    /// Up to `max` pages in the order the default policy would give them up: the inactive list
    /// oldest first, then the active list oldest first.
    pub fn candidates(&self, max: usize) -> Vec<u32> {
        let inactive = self.inactive.iter().filter(|&&e| self.live_inactive(e));
        let active = self.active.iter().filter(|&&e| self.live_active(e));
        inactive.chain(active).map(|e| e.0).take(max).collect()
    }

    /// Every page holding a frame or a swap slot (for freeing the memory).
    pub fn held(&self) -> impl Iterator<Item = (u32, Page)> + '_ {
        self.pages
            .iter()
            .enumerate()
            .filter(|(_, p)| **p != Page::Absent)
            .map(|(i, p)| (i as u32, *p))
    }

    /// Drops stale list entries once they outnumber live ones.
    fn compact(&mut self) {
        if self.active.len() > 2 * self.n_active as usize + 64 {
            let live: VecDeque<_> = self.active.iter().copied().filter(|&e| self.live_active(e)).collect();
            self.active = live;
        }
        if self.inactive.len() > 2 * self.n_inactive as usize + 64 {
            let live: VecDeque<_> = self
                .inactive
                .iter()
                .copied()
                .filter(|&e| self.live_inactive(e))
                .collect();
            self.inactive = live;
        }
    }

    /// The counts agree with the pages, and each counted page is on its list once.
    pub fn check(&self) -> Result<(), String> {
        let count = |f: fn(&Page) -> bool| self.pages.iter().filter(|p| f(p)).count() as u64;
        let (a, i, s) = (
            count(|p| matches!(p, Page::Resident { .. })),
            count(|p| matches!(p, Page::Inactive { .. })),
            count(|p| matches!(p, Page::Swapped(_))),
        );
        if (a, i, s) != (self.n_active, self.n_inactive, self.n_swapped) {
            return Err(format!(
                "counted {a} active, {i} inactive, {s} swapped; recorded {}, {}, {}",
                self.n_active, self.n_inactive, self.n_swapped
            ));
        }
        let on_active = self.active.iter().filter(|&&e| self.live_active(e)).count() as u64;
        let on_inactive = self.inactive.iter().filter(|&&e| self.live_inactive(e)).count() as u64;
        if on_active != a || on_inactive != i {
            return Err(format!(
                "lists hold {on_active} active and {on_inactive} inactive pages of {a} and {i}"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_order_is_inactive_then_active_oldest_first() {
        let mut t = Table::default();
        t.grow(8);
        for p in 0..6 {
            t.set_resident(p);
        }
        t.set_inactive(2, 0);
        t.set_inactive(0, 1);
        assert_eq!(t.candidates(10), vec![2, 0, 1, 3, 4, 5]);
        // A touch brings 2 back: newest on the active list.
        t.set_resident(2);
        assert_eq!(t.candidates(10), vec![0, 1, 3, 4, 5, 2]);
        t.set_swapped(0, Swapped { slot: 0, stream: 1 });
        assert_eq!(t.frames(), 5);
        assert_eq!(t.swapped(), 1);
        assert_eq!(t.oldest_active(), Some(1));
        t.check().unwrap();
    }

    #[test]
    fn stale_entries_do_not_grow_without_bound() {
        let mut t = Table::default();
        t.grow(2);
        for _ in 0..10_000 {
            t.set_resident(0);
            t.set_inactive(0, 0);
        }
        assert!(t.active.len() < 200 && t.inactive.len() < 200);
        t.check().unwrap();
    }
}
