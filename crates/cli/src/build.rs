//! `vino build` and `vino cc`: C programs that run as VINO processes, built by clang for
//! wasm32-wasi against wasi-libc and the SDK's compatibility layer.

use anyhow::{Result, bail};
use std::ffi::OsString;
use std::path::PathBuf;

/// What `vino build` adds to the graft builder's flags: the rest of a C command line.
#[derive(clap::Args)]
pub struct ProgramFlags {
    /// Link the library NAME (`-lNAME`; `-lwasi-emulated-NAME` also turns the emulation on).
    #[arg(short = 'l', value_name = "NAME")]
    libs: Vec<String>,
    /// Look for libraries in DIR.
    #[arg(short = 'L', value_name = "DIR")]
    lib_dirs: Vec<PathBuf>,
    /// A warning flag for clang, or with `l,` a linker flag: -Wall, -Wno-unused, -Wl,--export=f.
    #[arg(short = 'W', value_name = "FLAG", allow_hyphen_values = true)]
    warnings: Vec<String>,
    /// A code generation flag: -fno-strict-aliasing, -fwrapv...
    #[arg(short = 'f', value_name = "FLAG", allow_hyphen_values = true)]
    code_flags: Vec<String>,
    /// The C standard (clang's -std=STD): c99, gnu11...
    #[arg(long = "std", value_name = "STD")]
    std: Option<String>,
    /// wasi-libc's emulations to link, comma-separated: signal, mman (process-clocks and
    /// getpid are always on).
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    emulate: Vec<String>,
    /// Leave out the SDK's compatibility layer (chmod, chown, umask...).
    #[arg(long)]
    no_compat: bool,
    /// The compatibility layer without the kernel's calls, so the module runs on any WASI
    /// runtime too (chmod and chown then succeed without effect).
    #[arg(long)]
    portable: bool,
    /// Further arguments for clang, after `--`, as clang takes them (link flags go to the link).
    #[arg(last = true, value_name = "CLANG-ARGS")]
    clang_args: Vec<OsString>,
}

impl ProgramFlags {
    /// Adds these flags to `opts`.
    pub fn apply(self, opts: &mut vino_sdk::BuildOptions) {
        opts.link_args.extend(self.libs.iter().map(|l| format!("-l{l}").into()));
        opts.link_args
            .extend(self.lib_dirs.iter().map(|d| format!("-L{}", d.display()).into()));
        for w in &self.warnings {
            let flag: OsString = format!("-W{w}").into();
            if w.starts_with("l,") {
                opts.link_args.push(flag);
            } else {
                opts.extra_args.push(flag);
            }
        }
        opts.extra_args
            .extend(self.code_flags.iter().map(|f| format!("-f{f}").into()));
        if let Some(std) = &self.std {
            opts.extra_args.push(format!("-std={std}").into());
        }
        opts.emulate.extend(self.emulate);
        opts.compat = !self.no_compat;
        opts.portable = self.portable;
        opts.extra_args.extend(self.clang_args);
    }
}

/// `vino build`: sources into a program, or one of the programs VINO knows.
pub fn build(
    sources: Vec<PathBuf>,
    program: Option<String>,
    output: Option<PathBuf>,
    opts: vino_sdk::BuildOptions,
) -> Result<()> {
    match program {
        Some(name) => {
            let output = output.unwrap_or_else(|| PathBuf::from(format!("{name}.wasm")));
            vino_sdk::programs::build_named(&name, &output, &opts)?;
        }
        None => {
            let Some(first) = sources.first() else {
                bail!("no sources given");
            };
            let output = output.unwrap_or_else(|| first.with_extension("wasm"));
            vino_sdk::build_program(&sources, &output, &opts)?;
        }
    }
    Ok(())
}

/// `vino cc`: clang's command line, for makefiles and configure scripts.
pub fn cc(args: &[OsString]) -> Result<()> {
    vino_sdk::cc(args, &vino_sdk::BuildOptions::default())?;
    Ok(())
}
