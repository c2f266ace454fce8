//! The inode-to-path table. FUSE names files by inode; the kernel's system calls take paths. Each
//! inode Linux knows of is recorded with its parent and name (the last ones it was looked up
//! under), so a path is a walk to the root, and a rename of a directory moves its whole subtree
//! by changing one entry.

use std::collections::HashMap;

/// The root's inode, in FUSE and in the VINO file system alike.
pub const ROOT: u64 = 1;

/// Parent of a node that has no name any more (unlinked while Linux still holds it).
const DETACHED: u64 = 0;

#[derive(Debug)]
struct Node {
    parent: u64,
    name: String,
    /// Lookups Linux holds (it sends `forget` to drop them).
    lookups: u64,
}

/// Inodes Linux holds, with where they are in the namespace.
#[derive(Debug)]
pub struct Nodes {
    map: HashMap<u64, Node>,
}

impl Default for Nodes {
    fn default() -> Self {
        let root = Node {
            parent: ROOT,
            name: String::new(),
            lookups: 1,
        };
        Nodes {
            map: HashMap::from([(ROOT, root)]),
        }
    }
}

/// `dir/name` for an absolute directory path.
pub fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

impl Nodes {
    /// The absolute path of `ino`, or `None` if it is unknown or has lost its name.
    pub fn path(&self, ino: u64) -> Option<String> {
        let mut names = Vec::new();
        let mut at = ino;
        while at != ROOT {
            let node = self.map.get(&at)?;
            if node.parent == DETACHED {
                return None;
            }
            names.push(node.name.as_str());
            at = node.parent;
            // A cycle would mean a rename moved a directory into itself, which the kernel refuses.
            assert!(names.len() <= self.map.len(), "the inode table has a cycle at {ino}");
        }
        let mut path = String::from("/");
        path.push_str(&names.into_iter().rev().collect::<Vec<_>>().join("/"));
        Some(path)
    }

    /// The path of `name` in directory `parent`.
    pub fn child_path(&self, parent: u64, name: &str) -> Option<String> {
        self.path(parent).map(|dir| join(&dir, name))
    }

    /// The parent recorded for `ino` (the root is its own parent).
    pub fn parent(&self, ino: u64) -> Option<u64> {
        self.map.get(&ino).map(|n| n.parent).filter(|&p| p != DETACHED)
    }

    /// Linux was told of `ino` as `name` in `parent` (a lookup, create, mkdir or link reply).
    pub fn looked_up(&mut self, ino: u64, parent: u64, name: &str) {
        if ino == ROOT {
            return;
        }
        let node = self.map.entry(ino).or_insert(Node {
            parent,
            name: String::new(),
            lookups: 0,
        });
        node.parent = parent;
        node.name = name.to_string();
        node.lookups += 1;
    }

    /// Linux dropped `n` lookups of `ino`; at none left the entry goes.
    pub fn forget(&mut self, ino: u64, n: u64) {
        if ino == ROOT {
            return;
        }
        if let Some(node) = self.map.get_mut(&ino) {
            node.lookups = node.lookups.saturating_sub(n);
            if node.lookups == 0 {
                self.map.remove(&ino);
            }
        }
    }

    /// `ino` was renamed to `name` in `parent`.
    pub fn moved(&mut self, ino: u64, parent: u64, name: &str) {
        if let Some(node) = self.map.get_mut(&ino) {
            node.parent = parent;
            node.name = name.to_string();
        }
    }

    /// The name `name` in `parent` is gone; `ino` loses its path if that was the one recorded.
    pub fn removed(&mut self, ino: u64, parent: u64, name: &str) {
        if let Some(node) = self.map.get_mut(&ino)
            && node.parent == parent
            && node.name == name
        {
            node.parent = DETACHED;
        }
    }

    /// Inodes held (the root included).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_renames_of_a_subtree_and_forget_drops_entries() {
        let mut t = Nodes::default();
        t.looked_up(2, ROOT, "a");
        t.looked_up(3, 2, "b");
        t.looked_up(4, 3, "c.txt");
        assert_eq!(t.path(4).as_deref(), Some("/a/b/c.txt"));
        assert_eq!(t.child_path(ROOT, "x").as_deref(), Some("/x"));
        t.moved(3, ROOT, "moved");
        assert_eq!(t.path(4).as_deref(), Some("/moved/c.txt"));
        t.removed(4, 3, "other");
        assert_eq!(t.path(4).as_deref(), Some("/moved/c.txt"));
        t.removed(4, 3, "c.txt");
        assert_eq!(t.path(4), None);
        t.looked_up(4, 3, "again");
        assert_eq!(t.path(4).as_deref(), Some("/moved/again"));
        t.forget(4, 1);
        assert_eq!(t.path(4).as_deref(), Some("/moved/again"));
        t.forget(4, 1);
        assert_eq!(t.path(4), None);
        t.forget(ROOT, 5);
        assert_eq!(t.path(ROOT).as_deref(), Some("/"));
        assert_eq!(t.len(), 3);
    }
}
