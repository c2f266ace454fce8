//! `vino bench streams` at CI size: behaviour, not timing.

use vino_experiments::streams::{self, StreamsOptions};

#[test]
fn every_codec_runs_both_ways_on_both_corpora_with_the_same_bytes_as_native() {
    let opts = StreamsOptions {
        quick: true,
        binary: Some(std::env::current_exe().unwrap()),
        interrupt: vino_graft::Interrupt::Fuel,
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
    assert_eq!(report.tables().len(), 1);
}
