//! The tables of `docs/results/*.md` are what `results/*.json` give.

use std::path::Path;

use vino_measure::pages::{FIX_COMMAND, sync};

#[test]
fn result_pages_match_their_results() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let stale = sync(&root, true).unwrap();
    assert!(
        stale.is_empty(),
        "{stale:?} differ from results/*.json: run `{FIX_COMMAND}`"
    );
}
