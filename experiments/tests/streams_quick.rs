//! `vino bench streams` at CI size: behaviour, not timing.

use vino_experiments::streams::{self, StreamsOptions};

#[test]
fn every_codec_runs_both_ways_on_both_corpora_with_the_same_bytes_as_native() {
    let scratch = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let opts = StreamsOptions {
        quick: true,
        binary: Some(std::env::current_exe().unwrap()),
        interrupt: vino_graft::Interrupt::Fuel,
        scratch_dir: scratch.path().to_path_buf(),
        btrfs: false,
    };
    let report = streams::run(&opts, &mut |_| {}).expect("the streams bench runs");
    assert_eq!(report.corpora.len(), 2);
    assert_eq!(report.codecs.len(), 3 * 2 * 2, "{:#?}", report.codecs);
    for r in &report.codecs {
        assert!(r.wasm_mb_s > 0.0 && r.native_mb_s > 0.0, "{r:?}");
        assert!(r.stored_ratio > 0.0 && r.stored_ratio <= 1.1, "{r:?}");
    }
    let lz4_source = report
        .codecs
        .iter()
        .find(|r| r.codec == "lz4_stream" && r.corpus == "source")
        .unwrap();
    assert!(lz4_source.stored_ratio < 0.6, "source compresses: {lz4_source:?}");
    check_kernel_path(&report.kernel);
    assert_eq!(report.tables().len(), 3);
}

/// The device, VINO unbound and each codec wrote and read back every file (the bench checks
/// the bytes); LZ4 stored less than plain, in whole blocks no fewer than its coded bytes.
fn check_kernel_path(k: &streams::KernelPath) {
    let cases: Vec<(&str, &str)> = k.rows.iter().map(|r| (r.system.as_str(), r.codec.as_str())).collect();
    assert_eq!(
        cases,
        [
            ("device", "–"),
            ("VINO", "none"),
            ("VINO", "lz4_stream"),
            ("VINO", "chacha20poly1305_stream"),
            ("VINO", "crc32c_stream"),
        ]
    );
    for r in &k.rows {
        assert!(r.write_mb_s > 0.0 && r.read_mb_s > 0.0, "{r:?}");
        assert_eq!(r.write_vs_plain.is_some(), r.system != "device", "{r:?}");
    }
    let stored = |codec: &str| k.rows.iter().find(|r| r.codec == codec).unwrap().stored_bytes;
    assert!(stored("lz4_stream") < stored("none"));
    for corpus in ["source", "binary"] {
        let size = |what: &str| {
            k.compression
                .iter()
                .find(|r| r.corpus == corpus && r.what.starts_with(what))
                .map(|r| r.bytes)
        };
        let coded = size("VINO lz4_stream: chunks' coded").expect("coded bytes");
        let blocks = size("VINO lz4_stream: st_blocks").expect("st_blocks");
        assert!(coded > 0 && blocks >= coded, "{corpus}: {coded} coded in {blocks}");
    }
}
