//! Listings read in parts by position (`readdir_from`) while the directory changes: every
//! name present throughout is listed exactly once, no name twice, and nothing that never
//! existed.

mod common;

use common::*;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use vino_fs::{MkfsOptions, NewFile};

/// A change made between two parts of a listing.
#[derive(Debug, Clone)]
enum Change {
    /// Make a new name.
    Create,
    /// Remove the name at this index of the names there now (modulo their count).
    Unlink(usize),
    /// Rename the name at this index to a new name.
    Rename(usize),
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        3 => Just(Change::Create),
        2 => any::<usize>().prop_map(Change::Unlink),
        1 => any::<usize>().prop_map(Change::Rename),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn a_listing_read_in_parts_gives_each_name_present_throughout_once(
        initial in 0usize..400,
        parts in prop::collection::vec((1usize..60, prop::collection::vec(change(), 0..8)), 1..40),
    ) {
        let dev = fresh(8192, &MkfsOptions { blocks_per_group: 2048, inodes_per_group: Some(1024), ..Default::default() });
        let fs = mount(&dev);
        let who = NewFile::by(1);
        let d = fs.mkdir(fs.root(), "d", &who).unwrap();
        let mut next = 0;
        let mut fresh_name = || { next += 1; format!("name-of-some-length-{next:05}") };
        let mut there: BTreeSet<String> = BTreeSet::new();
        for _ in 0..initial {
            let n = fresh_name();
            fs.create(d, &n, &who).unwrap();
            there.insert(n);
        }
        let mut throughout = there.clone();
        let mut ever = there.clone();
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        let mut from = 0;
        let mut last = None;
        let mut parts = parts.into_iter();
        loop {
            let (size, changes) = parts.next().unwrap_or((64, Vec::new()));
            let part = fs.readdir_from(d, from, size).unwrap();
            prop_assert!(part.len() <= size);
            if part.is_empty() {
                break;
            }
            for (pos, e) in &part {
                prop_assert!(last.is_none_or(|l| *pos > l), "positions increase");
                last = Some(*pos);
                *seen.entry(e.name_lossy()).or_default() += 1;
            }
            from = part.last().unwrap().0 + 1;
            for c in changes {
                let names: Vec<String> = there.iter().cloned().collect();
                match c {
                    Change::Create => {
                        let n = fresh_name();
                        fs.create(d, &n, &who).unwrap();
                        ever.insert(n.clone());
                        there.insert(n);
                    }
                    Change::Unlink(i) if !names.is_empty() => {
                        let n = &names[i % names.len()];
                        fs.unlink(d, n).unwrap();
                        there.remove(n);
                        throughout.remove(n);
                    }
                    Change::Rename(i) if !names.is_empty() => {
                        let n = &names[i % names.len()];
                        let to = fresh_name();
                        fs.rename(d, n, d, &to).unwrap();
                        there.remove(n);
                        throughout.remove(n);
                        ever.insert(to.clone());
                        there.insert(to);
                    }
                    _ => {}
                }
            }
        }
        prop_assert_eq!(seen.get("."), Some(&1));
        prop_assert_eq!(seen.get(".."), Some(&1));
        for (name, n) in &seen {
            prop_assert_eq!(*n, 1, "{} listed {} times", name, n);
            prop_assert!(name == "." || name == ".." || ever.contains(name), "{} never existed", name);
        }
        for name in &throughout {
            prop_assert!(seen.contains_key(name), "{} was there throughout but not listed", name);
        }
        // Unchanged, a listing in parts is the whole listing.
        let whole: BTreeSet<String> = fs.readdir(d).unwrap().into_iter().map(|e| e.name_lossy()).collect();
        prop_assert_eq!(whole, there);
    }
}
