//! Every fuzz target on stable: its seeds, the inputs kept in `fuzz/regressions/<target>/`
//! (each once a failure, now a test), and pseudo-random inputs.

use std::path::Path;
use vino_fuzzing::{TARGETS, seeds};

fn target(name: &str) -> fn(&[u8]) {
    TARGETS.iter().find(|(n, _)| *n == name).expect("a target").1
}

/// The files of `fuzz/regressions/<name>/`, if any.
fn regressions(name: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/regressions")
        .join(name);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<_> = entries.map(|e| e.expect("a directory entry").path()).collect();
    files.sort();
    files
        .iter()
        .map(|f| std::fs::read(f).expect("a regression input"))
        .collect()
}

fn replay(name: &str, random: usize, max_len: usize) {
    let run = target(name);
    let inputs = seeds::seeds(name)
        .into_iter()
        .chain(regressions(name))
        .chain(seeds::random(name.len() as u64, random, max_len));
    for (i, input) in inputs.enumerate() {
        if std::panic::catch_unwind(|| run(&input)).is_err() {
            // Kept where `cargo fuzz run <target> <file>` (or this test, once the file is in
            // fuzz/regressions/<target>/) can run it again.
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-failures");
            std::fs::create_dir_all(&dir).expect("a directory for failing inputs");
            let file = dir.join(format!("{name}-{i}"));
            std::fs::write(&file, &input).expect("writing the failing input");
            panic!("{name}: input {i} failed (above); it is in {}", file.display());
        }
    }
}

#[test]
fn protocol() {
    replay("protocol", 32, 300);
}

#[test]
fn frames() {
    replay("frames", 32, 400);
}

#[test]
fn image() {
    replay("image", 32, 120);
}

#[test]
fn graft() {
    replay("graft", 32, 3000);
}

#[test]
fn program() {
    replay("program", 32, 400);
}

/// The graft target is only as good as the modules it makes: most must load (a module with
/// its argument area outside its memory, or over the memory cap, is refused).
#[test]
fn most_generated_grafts_load() {
    let inputs = seeds::random(11, 60, 3000);
    let reports: Vec<_> = inputs.iter().filter_map(|i| vino_fuzzing::graft::simulate(i)).collect();
    let loaded = reports.iter().filter(|r| r.grafts_loaded > 0).count();
    assert!(
        loaded * 2 > inputs.len(),
        "{loaded} of {} inputs loaded a module",
        inputs.len()
    );
}

/// The protocol seeds reach the system calls: the owner's requests are answered, mostly
/// without an error, and user 1001 may not open the owner's file for writing.
#[test]
fn protocol_seeds_are_served() {
    let seeds = seeds::seeds("protocol");
    let refused = vino_fuzzing::protocol::answers(&seeds[1]);
    assert!(
        matches!(&refused[2], vino_proto::Response::Error(e) if e.errno == vino_proto::errno::EACCES),
        "{refused:?}"
    );
    for i in [0, 2, 3] {
        let answers = vino_fuzzing::protocol::answers(&seeds[i]);
        assert!(
            matches!(answers.first(), Some(vino_proto::Response::Hello { .. })),
            "seed {i}: {answers:?}"
        );
        let errors = answers
            .iter()
            .filter(|a| matches!(a, vino_proto::Response::Error(_)))
            .count();
        assert!(
            answers.len() > 8 && errors * 3 < answers.len(),
            "seed {i}: {answers:#?}"
        );
    }
}

/// The program target is only as good as the calls it makes: inputs must turn into programs
/// that call the kernel through many of WASI's path and descriptor calls.
#[test]
fn program_inputs_make_many_kinds_of_calls() {
    let mut kinds = std::collections::BTreeSet::new();
    for input in seeds::seeds("program") {
        let wat = vino_fuzzing::program::program(&mut arbitrary::Unstructured::new(&input)).unwrap();
        kinds.extend(
            wat.lines()
                .filter_map(|l| l.trim().strip_prefix("(drop (call $")?.split(' ').next())
                .map(String::from),
        );
    }
    assert!(kinds.len() >= 12, "{kinds:?}");
}

#[test]
fn image_seeds_reach_the_chunk_maps() {
    use vino_fuzzing::image::{chunk_map_inputs, mutate};
    let inputs = chunk_map_inputs();
    // Fifteen ways to break a map, on each copy of each stream file's first map.
    assert!(inputs.len() >= 30, "{} inputs", inputs.len());
    let template = mutate(&[]);
    let idle = inputs.iter().filter(|i| mutate(i) == template).count();
    assert_eq!(idle, 0, "inputs that change nothing");
}

#[test]
fn recording() {
    replay("recording", 32, 400);
    // And real recordings with one byte changed, at each of many places: read and replayed,
    // bounded, never a panic.
    let run = target("recording");
    let seed = vino_fuzzing::recording::recorded(20);
    for at in (0..seed.len()).step_by(3) {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut input = vec![(at % 2) as u8];
            input.extend_from_slice(&seed);
            input[1 + at] ^= flip;
            run(&input);
        }
    }
    // And one with page accesses, on the victim ghost too.
    let seed = vino_fuzzing::recording::with_accesses(20, 64, 16);
    for at in (0..seed.len()).step_by(7) {
        for flip in [0x01u8, 0xff] {
            let mut input = vec![2 + (at % 2) as u8];
            input.extend_from_slice(&seed);
            input[1 + at] ^= flip;
            run(&input);
        }
    }
}
