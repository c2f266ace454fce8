//! Compiled programs kept on disk between runs, so `vino run --image` compiles a program once,
//! not at every run (SQLite's 1.1 MB of Wasm takes about 0.7 s to compile).
//!
//! A compiled module is machine code that wasmtime maps and runs as it is: whoever can write a
//! file in the cache can make the next run execute anything. So the cache is the user's own: a
//! directory owned by the running user and writable by nobody else, files owned by the user and
//! writable by nobody else; anything else is passed over and the program compiled as if there
//! were no cache. A file is named by the SHA-256 of the module's bytes and the engine's
//! compatibility hash (wasmtime's version and the settings code depends on), so a file is only
//! ever loaded for the bytes and the engine it was made from; wasmtime checks the latter again.

use sha2::{Digest, Sha256};
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use wasmtime::{Engine, Module};

/// Compiled programs kept at most; the least recently used go first.
const MAX_ENTRIES: usize = 32;

/// A directory of compiled programs ([`DiskCache::open`]).
#[derive(Debug, Clone)]
pub struct DiskCache {
    dir: PathBuf,
}

/// The running user's id.
fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Owned by this user and writable by nobody else.
fn private(meta: &fs::Metadata) -> bool {
    meta.uid() == euid() && meta.mode() & 0o022 == 0
}

impl DiskCache {
    /// `$XDG_CACHE_HOME/vino/programs`, else `$HOME/.cache/vino/programs`.
    pub fn default_dir() -> Option<PathBuf> {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
        Some(base.join("vino/programs"))
    }

    /// The cache at `dir`, made (mode 0700) if it is not there; `None` if it cannot be made or
    /// is not private to this user.
    pub fn open(dir: &Path) -> Option<DiskCache> {
        if !dir.exists() {
            fs::create_dir_all(dir).ok()?;
            fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).ok()?;
        }
        let meta = fs::symlink_metadata(dir).ok()?;
        (meta.is_dir() && private(&meta)).then(|| DiskCache { dir: dir.to_owned() })
    }

    /// Where the compiled form of `wasm` for `engine` is kept.
    fn path(&self, engine: &Engine, wasm: &[u8]) -> PathBuf {
        let mut engine_hash = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut engine_hash);
        let digest = Sha256::digest(wasm);
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        self.dir.join(format!("{hex}-{:016x}.cwasm", engine_hash.finish()))
    }

    /// The module compiled from `wasm` before, if a private file of it is here and loads.
    pub(crate) fn load(&self, engine: &Engine, wasm: &[u8]) -> Option<Module> {
        let path = self.path(engine, wasm);
        let meta = fs::symlink_metadata(&path).ok()?;
        if !meta.is_file() || !private(&meta) {
            return None;
        }
        // Read, not mapped: a file changed under a mapping would fault the running program.
        let bytes = fs::read(&path).ok()?;
        // SAFETY: the bytes are a file of this user's own, in this user's own directory, named
        // by the module's bytes and the engine; only `store` below writes such files, from a
        // module this engine compiled. wasmtime checks the engine's compatibility again.
        let module = unsafe { Module::deserialize(engine, &bytes) }.ok()?;
        // Touched: the least recently used go first.
        let _ = fs::File::open(&path).and_then(|f| f.set_modified(std::time::SystemTime::now()));
        Some(module)
    }

    /// Keeps `module`, compiled from `wasm`; a failure only means the next run compiles again.
    pub(crate) fn store(&self, engine: &Engine, wasm: &[u8], module: &Module) {
        let Ok(bytes) = module.serialize() else { return };
        let path = self.path(engine, wasm);
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let written = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| f.write_all(&bytes));
        if written.and_then(|()| fs::rename(&tmp, &path)).is_err() {
            let _ = fs::remove_file(&tmp);
            return;
        }
        self.prune();
    }

    /// Removes the least recently used files past [`MAX_ENTRIES`], and temporary files a run
    /// that died while writing left more than an hour ago.
    fn prune(&self) {
        let Ok(dir) = fs::read_dir(&self.dir) else { return };
        let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        let mut files: Vec<(std::time::SystemTime, PathBuf)> = Vec::new();
        for e in dir.flatten() {
            let Some(modified) = e.metadata().ok().and_then(|m| m.modified().ok()) else {
                continue;
            };
            let path = e.path();
            match path.extension().and_then(|x| x.to_str()) {
                Some("cwasm") => files.push((modified, path)),
                Some(x) if x.starts_with("tmp") && modified < hour_ago => {
                    let _ = fs::remove_file(&path);
                }
                _ => {}
            }
        }
        if files.len() <= MAX_ENTRIES {
            return;
        }
        files.sort();
        for (_, old) in &files[..files.len() - MAX_ENTRIES] {
            let _ = fs::remove_file(old);
        }
    }
}
