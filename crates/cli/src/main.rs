//! `vino`: the VINO command.
//!
//! `vino demo` shows the safe-extension core at work; `vino graft build` turns C into a graft;
//! `vino mkfs`, `vino fsck`, `vino daemon`, `vino mount` and `vino top` run the storage kernel;
//! `vino bench <experiment>` runs an experiment's own program (`experiments/`).

#![forbid(unsafe_code)]

mod bench;
mod build;
mod demo;
mod graft;
mod remote;
mod run;
mod storage;
mod stream;
mod table;

use clap::{Parser, Subcommand};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "vino",
    version,
    about = "VINO: an extensible kernel in user space, with safe grafts"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Load grafts into a small kernel object: a good graft working, hostile grafts aborted,
    /// and the core costs measured.
    Demo {
        /// Skip the measurements at the end.
        #[arg(long)]
        no_bench: bool,
        /// The disk image the storage part creates (64 MB).
        #[arg(long, default_value = "target/vino-demo.img")]
        image: PathBuf,
    },
    /// Build, inspect and check grafts.
    #[command(subcommand)]
    Graft(graft::GraftCommand),
    /// Stream files: bind a codec (a `file.stream` graft) to a file or directory, give it its
    /// key, see what is bound.
    #[command(subcommand)]
    Stream(stream::StreamCommand),
    /// Make a VINO file system on an image file or a block device.
    Mkfs {
        image: PathBuf,
        /// Create the image with this size if it does not exist (e.g. 256M, 2G).
        #[arg(long, value_parser = storage::parse_size)]
        size: Option<u64>,
        /// Blocks per cylinder group (a multiple of 8, 64..=32768).
        #[arg(long)]
        blocks_per_group: Option<u32>,
        /// Print what was made as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Check a VINO file system (replaying its journal) and, with --repair, fix what is wrong;
    /// with --upgrade, first bring an image of an older format version to this one.
    /// Exit status: 0 clean, 1 repaired, 4 problems left, 8 could not check.
    Fsck {
        image: PathBuf,
        #[arg(long)]
        repair: bool,
        /// Upgrade an image made by an older VINO to this format version, then check it.
        #[arg(long)]
        upgrade: bool,
        #[arg(long)]
        json: bool,
    },
    /// Serve the kernel to other processes on a Unix socket (vinod), in the foreground, until
    /// SIGTERM or Ctrl-C. The image is made (with a file system) on first use.
    Daemon {
        #[arg(long)]
        image: PathBuf,
        /// The socket (default: $VINO_SOCKET, else /run/vino/vinod.sock).
        #[arg(long)]
        socket: Option<PathBuf>,
        /// A TOML configuration file (socket, image_size, cache_frames, privileged_group, ...).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Mount the file system through FUSE so unmodified programs use it: `vino mount disk.img
    /// /mnt/vino` serves the image (as `vino daemon` does) until interrupted or unmounted; `vino mount
    /// /mnt/vino` asks the running daemon to mount its file system there.
    Mount {
        /// The image to serve (made on first use); without it, the running daemon is asked.
        #[arg(value_name = "IMAGE")]
        first: PathBuf,
        /// The mount point (an empty directory).
        second: Option<PathBuf>,
        #[arg(long)]
        socket: Option<PathBuf>,
        /// A TOML configuration file, as for `vino daemon`.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Undo `vino mount MOUNTPOINT` (a mount the running daemon made).
    Unmount {
        mountpoint: PathBuf,
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Make what was written durable: the daemon writes back every dirty page and commits its
    /// journal before answering. Linux does not pass `sync` or `syncfs` on to a FUSE mount like
    /// VINO's, so on the mount this is what `sync -f` is on ext4. With PATH (a path on a VINO mount), the
    /// daemon serving that mount; else the one on --socket (or the default socket).
    Sync {
        path: Option<PathBuf>,
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// The programs running in the daemon (`vino run` without --image) that you may see: yours,
    /// or all if privileged; their CPU, open files, cache and grafts.
    Ps {
        #[arg(long)]
        json: bool,
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Kill a program running in the daemon (yours, or any if privileged), by its process id
    /// as `vino ps` shows it.
    Kill {
        pid: u64,
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Sets CPU tickets in the daemon: a process's (yours; `vino ps` gives pids) in its user's
    /// currency, or with --user a user's against the others (privileged). Default 100 each.
    Nice {
        tickets: u32,
        pid: Option<u64>,
        /// Set this user's tickets instead of a process's.
        #[arg(long, value_name = "UID")]
        user: Option<u32>,
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Live view of vinod's processes and grafts: calls, I/O, graft time and aborts, cache.
    Top {
        /// Print one snapshot and exit.
        #[arg(long)]
        once: bool,
        /// Print one snapshot as JSON and exit.
        #[arg(long)]
        json: bool,
        /// Refresh period in milliseconds.
        #[arg(long, default_value_t = 1000)]
        interval: u64,
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Build a program that runs as a VINO process (`vino run`): C sources compiled one by one
    /// with clang for wasm32-wasi (its warnings shown; implicit declarations, implicit int,
    /// int conversions and incompatible pointers are errors) and linked against wasi-libc and
    /// the SDK's compatibility layer; or one of the real programs VINO knows. sdk/PORTING.md
    /// takes a C project through it.
    Build {
        /// The C sources (and any .o or .a to link).
        #[arg(required_unless_present = "program", conflicts_with = "program")]
        sources: Vec<PathBuf>,
        /// A real program instead: sqlite3 (a shell over SQLite), gzip (gzip and gunzip over
        /// zlib; run it as gunzip.wasm to decompress), bzip2, all from crates' sources; lz4,
        /// zstd, minigzip (zlib's), from Debian bookworm's sources (fetched with apt-get source).
        #[arg(long)]
        program: Option<String>,
        /// The program to write (default: the first source, or the program's name, with .wasm).
        #[arg(short, long)]
        output: Option<PathBuf>,
        #[command(flatten)]
        flags: graft::BuildFlags,
        #[command(flatten)]
        program_flags: build::ProgramFlags,
    },
    /// clang for programs that run as VINO processes, taking clang's own arguments, for
    /// makefiles and configure scripts: `make CC="vino cc"`. As `vino build`, plus -c/-S/-E/-M;
    /// `--emulate=NAME,...` and `--no-compat` are its own.
    #[command(disable_help_flag = true)]
    Cc {
        /// clang's arguments (no --target).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Run a program compiled to WebAssembly (WASI preview 1, e.g. `vino build`) as a VINO
    /// process, on a disk image or in the running daemon: its system calls are the kernel's,
    /// with your user's permissions. A `|` argument (`\|` to the shell) starts a pipeline:
    /// `vino run -- zstd.wasm -dc f.zst \| lz4.wasm -c`. A program is a .wasm file, or the name
    /// of one the SDK builds (lz4, zstd, minigzip, gzip, bzip2, sqlite3). Ctrl-C sends SIGINT to
    /// every process it started. Exit status: the program's (a pipeline's: the last stage's
    /// that is not 0, as with pipefail); 134 if it trapped; 128+N if signal N ended it.
    Run {
        /// Run on this disk image (with a file system: see `vino mkfs`), the kernel in this
        /// process; without it, in the running daemon.
        #[arg(long)]
        image: Option<PathBuf>,
        /// The daemon's socket (default: $VINO_SOCKET, else /run/vino/vinod.sock).
        #[arg(long, conflicts_with = "image")]
        socket: Option<PathBuf>,
        /// In the daemon, detached: print its process id and return; it runs on without input
        /// or output until it ends or `vino kill` stops it.
        #[arg(long, conflicts_with = "image")]
        detach: bool,
        /// An environment variable for the program, NAME=VALUE (repeatable).
        #[arg(long = "env", value_name = "NAME=VALUE")]
        env: Vec<String>,
        /// Most linear memory the program may grow to (e.g. 256M; default 1G).
        #[arg(long, value_parser = storage::parse_size)]
        memory: Option<u64>,
        /// A directory of VINO's file system the program may reach, as PATH or as PATH::NAME
        /// (seen by the program as NAME); repeatable. Without any, it reaches the whole file
        /// system as `/`. No path leads out of the directories given.
        #[arg(long = "dir", value_name = "PATH[::NAME]")]
        dirs: Vec<String>,
        /// Its working directory (`PWD`; default `/`), which programs built by `vino build`
        /// change to as they start.
        #[arg(long, value_name = "DIR")]
        cwd: Option<String>,
        /// With --image: compile the program again instead of taking it from the user's cache
        /// of compiled programs ($XDG_CACHE_HOME/vino/programs, else ~/.cache/vino/programs).
        #[arg(long)]
        no_cache: bool,
        /// A socket the program gets before it starts, listening on a port of VINO's network:
        /// tcp:PORT (accept connections on it) or udp:PORT (a bound UDP socket); repeatable. The
        /// descriptors follow the directories' and /dev's: the --listen sockets in order, then
        /// the --connect ones.
        #[arg(long, value_name = "tcp:PORT|udp:PORT")]
        listen: Vec<String>,
        /// A TCP connection the program gets before it starts, to HOST:PORT on VINO's network
        /// (HOST an IPv4 address or localhost); repeatable.
        #[arg(long, value_name = "HOST:PORT")]
        connect: Vec<String>,
        /// The program (.wasm, or the name of one the SDK builds).
        program: PathBuf,
        /// Its arguments; `|` starts the next program of a pipeline.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Run an experiment: its program `vino-bench-<experiment>`, built by `cargo build --release -p
    /// vino-experiments`, with the arguments given (results as tables, JSON and plots in results/).
    Bench {
        #[command(subcommand)]
        which: bench::BenchCommand,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo { no_bench, image } => demo::run(!no_bench, &image),
        Command::Graft(cmd) => graft::run(cmd),
        Command::Stream(cmd) => stream::run(cmd),
        Command::Bench { which } => bench::run(which),
        Command::Daemon { image, socket, config } => remote::daemon(&image, socket, config),
        Command::Mount {
            first,
            second,
            socket,
            config,
        } => match second {
            Some(mountpoint) => remote::mount(Some(&first), &mountpoint, socket, config),
            None => remote::mount(None, &first, socket, config),
        },
        Command::Unmount { mountpoint, socket } => remote::unmount(&mountpoint, socket),
        Command::Sync { path, socket } => remote::sync(path.as_deref(), socket),
        Command::Ps { json, socket } => remote::ps(socket, json),
        Command::Kill { pid, socket } => remote::kill(socket, pid),
        Command::Nice {
            tickets,
            pid,
            user,
            socket,
        } => remote::nice(socket, tickets, pid, user),
        Command::Top {
            once,
            json,
            interval,
            socket,
        } => remote::top(socket, once, json, interval),
        Command::Mkfs {
            image,
            size,
            blocks_per_group,
            json,
        } => storage::run_mkfs(&image, size, blocks_per_group, json),
        Command::Build {
            sources,
            program,
            output,
            flags,
            program_flags,
        } => flags.options().and_then(|mut opts| {
            program_flags.apply(&mut opts);
            build::build(sources, program, output, opts)
        }),
        Command::Cc { args } => build::cc(&args),
        Command::Run {
            image,
            socket,
            detach,
            env,
            memory,
            dirs,
            cwd,
            no_cache,
            listen,
            connect,
            program,
            args,
        } => {
            // Listening sockets first, then connections (clap keeps no order across flags).
            let sockets: Vec<(bool, String)> = listen
                .into_iter()
                .map(|s| (true, s))
                .chain(connect.into_iter().map(|s| (false, s)))
                .collect();
            let a = run::RunArgs {
                image: image.as_deref(),
                socket,
                detach,
                program: &program,
                args: &args,
                env: &env,
                memory,
                dirs: &dirs,
                cwd: cwd.as_deref(),
                no_cache,
                sockets: &sockets,
            };
            match run::run(&a) {
                Ok(status) => return ExitCode::from(status as u8),
                Err(e) => Err(e),
            }
        }
        Command::Fsck {
            image,
            repair,
            upgrade,
            json,
        } => match storage::run_fsck(&image, repair, upgrade, json) {
            Ok(status) => return ExitCode::from(status as u8),
            Err(e) => Err(e),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vino: {e:#}");
            ExitCode::FAILURE
        }
    }
}
