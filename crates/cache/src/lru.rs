//! Intrusive doubly-linked lists over frame numbers: the global LRU order and each process's
//! own LRU order, kept in step so that a process's first page is also its oldest globally.

pub const NIL: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
pub struct Links {
    pub prev: u32,
    pub next: u32,
}

impl Default for Links {
    fn default() -> Self {
        Links { prev: NIL, next: NIL }
    }
}

/// A list whose links live in a slice indexed by frame: head is least recently used.
#[derive(Debug, Clone, Copy)]
pub struct List {
    pub head: u32,
    pub tail: u32,
    pub len: usize,
}

impl Default for List {
    fn default() -> Self {
        List {
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }
}

impl List {
    pub fn push_back(&mut self, links: &mut [Links], i: u32) {
        links[i as usize] = Links {
            prev: self.tail,
            next: NIL,
        };
        if self.tail == NIL {
            self.head = i;
        } else {
            links[self.tail as usize].next = i;
        }
        self.tail = i;
        self.len += 1;
    }

    pub fn remove(&mut self, links: &mut [Links], i: u32) {
        let Links { prev, next } = links[i as usize];
        if prev == NIL {
            debug_assert_eq!(self.head, i, "removing a frame that is not in the list");
            self.head = next;
        } else {
            links[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            links[next as usize].prev = prev;
        }
        links[i as usize] = Links::default();
        self.len -= 1;
    }

    /// Moves `i` to the least-recently-used end (the next to go).
    pub fn move_to_front(&mut self, links: &mut [Links], i: u32) {
        if self.head != i {
            self.remove(links, i);
            links[i as usize] = Links {
                prev: NIL,
                next: self.head,
            };
            if self.head == NIL {
                self.tail = i;
            } else {
                links[self.head as usize].prev = i;
            }
            self.head = i;
            self.len += 1;
        }
    }

    /// Moves `i` to the most-recently-used end.
    pub fn touch(&mut self, links: &mut [Links], i: u32) {
        if self.tail != i {
            self.remove(links, i);
            self.push_back(links, i);
        }
    }

    /// Frames from least to most recently used.
    pub fn iter<'a>(&self, links: &'a [Links]) -> impl Iterator<Item = u32> + 'a {
        let mut cur = self.head;
        std::iter::from_fn(move || {
            (cur != NIL).then(|| {
                let i = cur;
                cur = links[i as usize].next;
                i
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_remove_touch_keep_order() {
        let mut links = vec![Links::default(); 5];
        let mut l = List::default();
        for i in 0..5 {
            l.push_back(&mut links, i);
        }
        l.touch(&mut links, 1);
        l.remove(&mut links, 3);
        assert_eq!(l.iter(&links).collect::<Vec<_>>(), vec![0, 2, 4, 1]);
        l.remove(&mut links, 0);
        l.remove(&mut links, 1);
        assert_eq!(l.iter(&links).collect::<Vec<_>>(), vec![2, 4]);
        assert_eq!((l.head, l.tail, l.len), (2, 4, 2));
    }
}
