//! `vino stream ...`: bind a stream codec (a `file.stream` graft) to a file or directory, and
//! give it its key, through the daemon. A PATH is a path in the VINO file system, or a file on a
//! VINO mount (whose daemon is then the one asked).

use crate::remote::{connect, file_arg};
use anyhow::{Context, Result, bail};
use clap::Subcommand;
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum StreamCommand {
    /// Bind a codec to an empty regular file or a directory (files made in it get the codec).
    /// Only the file's owner may. Quiet on success.
    Bind {
        path: String,
        /// The codec's module (.wasm), a `file.stream` graft.
        module: PathBuf,
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Unbind the codec of a file or directory.
    Unbind {
        path: String,
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// The codec bound to a file or directory: its module's SHA-256, and whether it is loaded.
    Status {
        path: String,
        #[arg(long)]
        json: bool,
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Give the codec of a stream file its 256-bit key, as 64 hex digits: the key's bytes in
    /// order, passed as `set_key(word, value)` for words 0..3, word w being bytes 8w..8w+8 read
    /// little-endian (so the codec holds the bytes in the order written). Only the owner may.
    Key {
        path: String,
        /// 64 hex digits.
        key: String,
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Which files and directories depend on which codec module (yours; every one for root):
    /// inode, owner, kind, module, and whether the owner's codec is loaded.
    Ls {
        #[arg(long)]
        json: bool,
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Remove the stored codec modules no file names any more (root only); prints how many.
    Gc {
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Call one of the codec's control functions (its name without `vino_ctl_`) with integer
    /// arguments; prints its result.
    Ctl {
        path: String,
        name: String,
        #[arg(allow_negative_numbers = true)]
        args: Vec<i64>,
        #[arg(long)]
        socket: Option<PathBuf>,
    },
}

pub fn run(cmd: StreamCommand) -> Result<()> {
    match cmd {
        StreamCommand::Bind { path, module, socket } => {
            let wasm = std::fs::read(&module).with_context(|| format!("reading {}", module.display()))?;
            let (path, socket) = file_arg(&path, socket);
            connect(socket)?
                .stream_bind(&path, &wasm)
                .with_context(|| format!("binding {} to {path}", module.display()))?;
        }
        StreamCommand::Unbind { path, socket } => {
            let (path, socket) = file_arg(&path, socket);
            connect(socket)?
                .stream_unbind(&path)
                .with_context(|| format!("unbinding the codec of {path}"))?;
        }
        StreamCommand::Status { path, json, socket } => {
            let (path, socket) = file_arg(&path, socket);
            let status = connect(socket)?.stream_status(&path).with_context(|| path.clone())?;
            if json {
                println!("{}", serde_json::to_string_pretty(&status)?);
            } else {
                match status {
                    Some(s) => println!(
                        "{path}: {} ({})",
                        s.module,
                        if s.loaded { "loaded" } else { "not loaded" }
                    ),
                    None => println!("{path}: no stream codec"),
                }
            }
        }
        StreamCommand::Key { path, key, socket } => {
            let Some(key) = vino_client::parse_stream_key(&key) else {
                bail!("a key is 64 hex digits (32 bytes)");
            };
            let (path, socket) = file_arg(&path, socket);
            connect(socket)?
                .stream_set_key(&path, &key)
                .with_context(|| format!("giving the codec of {path} its key"))?;
        }
        StreamCommand::Ls { json, socket } => {
            let files = connect(socket)?.stream_files().context("listing stream files")?;
            if json {
                println!("{}", serde_json::to_string_pretty(&files)?);
            } else {
                println!("{:>8} {:>6} {:<9} {:<64} loaded", "ino", "uid", "kind", "module");
                for f in files {
                    println!(
                        "{:>8} {:>6} {:<9} {:<64} {}",
                        f.ino,
                        f.uid,
                        f.kind,
                        f.module,
                        if f.loaded { "yes" } else { "no" }
                    );
                }
            }
        }
        StreamCommand::Gc { socket } => {
            let n = connect(socket)?.stream_collect().context("collecting stream modules")?;
            println!("{n}");
        }
        StreamCommand::Ctl {
            path,
            name,
            args,
            socket,
        } => {
            let (path, socket) = file_arg(&path, socket);
            let r = connect(socket)?
                .stream_control(&path, &name, &args)
                .with_context(|| format!("{name} on the codec of {path}"))?;
            println!("{r}");
        }
    }
    Ok(())
}
