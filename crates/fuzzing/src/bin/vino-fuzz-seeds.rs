//! Writes every fuzz target's seeds into `DIR/<target>/` (the corpus a fuzzing run starts
//! from; scripts/fuzz.sh calls it). Quiet on success.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir] = args.as_slice() else {
        eprintln!("usage: vino-fuzz-seeds DIR");
        return ExitCode::from(2);
    };
    for (name, _) in vino_fuzzing::TARGETS {
        let to = PathBuf::from(dir).join(name);
        let written = std::fs::create_dir_all(&to).and_then(|()| {
            for (i, seed) in vino_fuzzing::seeds::seeds(name).iter().enumerate() {
                std::fs::write(to.join(format!("seed-{i:03}")), seed)?;
            }
            Ok(())
        });
        if let Err(e) = written {
            eprintln!("vino-fuzz-seeds: {}: {e}", to.display());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
