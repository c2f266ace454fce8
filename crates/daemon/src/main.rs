//! `vinod [--config FILE] [--image IMG] [--socket PATH]`: serve the VINO kernel until SIGTERM.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use vino_daemon::Config;

// The allocator `vino` uses too (see the workspace's Cargo.toml).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const USAGE: &str = "usage: vinod [--config FILE] [--image IMAGE] [--socket PATH]";

fn parse() -> Result<Config, String> {
    let mut args = std::env::args().skip(1);
    let (mut config, mut image, mut socket) = (None, None, None);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{a} needs a value\n{USAGE}"));
        match a.as_str() {
            "--config" => config = Some(PathBuf::from(value()?)),
            "--image" => image = Some(PathBuf::from(value()?)),
            "--socket" => socket = Some(PathBuf::from(value()?)),
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument `{other}`\n{USAGE}")),
        }
    }
    let mut c = match config {
        Some(path) => Config::load(&path)?,
        None => Config::default(),
    };
    c.image = image.unwrap_or(c.image);
    c.socket = socket.unwrap_or(c.socket);
    Ok(c)
}

fn main() -> ExitCode {
    let result = parse().and_then(|c| vino_daemon::run(c).map_err(|e| e.to_string()));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vinod: {e}");
            ExitCode::FAILURE
        }
    }
}
