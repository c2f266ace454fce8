//! Stream files: files whose owner has bound a codec (a `file.stream` graft, Small 1998, 4.2)
//! that every byte of the file flows through. The page cache keeps plain pages; a chunk is
//! encoded when the cache writes it back and decoded on a miss ([`StreamFile`], the cache's
//! [`ChunkStore`] for the file). The file system keeps the encoded chunks and names the codec's
//! module in the inode; the kernel keeps the modules themselves, content-addressed, in
//! `/.vino/streams/<sha256>` (root's directory, mode 0700; each module file owned by, and
//! charged to, the user who bound it first) and loads a module again on the first access after
//! a mount.
//!
//! One codec instance serves every file of one owner bound to one module: the owner's key,
//! given by a control call, lives in that instance's linear memory only, which nothing reads
//! back. A codec that fails fails the operation that needed it: write-back (the pages stay
//! dirty; fsync and close report EIO), or a read (EIO, or EACCES while the codec has no key);
//! it never falls back to storing or showing anything else.

use crate::SysResult;
use crate::error::{Errno, SysError};
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use sha2::{Digest, Sha256};
use std::io;
use std::sync::Arc;
use vino_cache::{ChunkStore, PageCache};
use vino_fs::{CHUNK_BYTES, FileSystem, ModuleId, NewChunk, NewFile};
use vino_graft::account::Account;
use vino_graft::{GraftPoint, Owner, Runtime};
use vino_stream::{Codec, Encoded, StreamError};

/// The directory (under the root) that holds the codecs' modules.
const MODULE_DIR: [&str; 2] = [".vino", "streams"];

/// A module's name in [`MODULE_DIR`]: its hash in hex.
pub fn module_name(id: &ModuleId) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// The content hash that names a module.
pub fn module_id(wasm: &[u8]) -> ModuleId {
    Sha256::digest(wasm).into()
}

/// The loaded codecs, by owner and module; loaded from the module store on first need.
pub struct Codecs {
    runtime: Runtime,
    fs: Arc<FileSystem>,
    loaded: Mutex<FxHashMap<(u32, ModuleId), Arc<Codec>>>,
}

impl Codecs {
    /// The codec of `uid` for `module`, loaded from the module store if it is not yet. The
    /// instance is charged to the user's `account` (grafts loaded, their memory and code, as
    /// any graft's), and so is every chunk's CPU.
    pub fn get(&self, uid: u32, module: ModuleId, account: &Arc<Account>) -> SysResult<Arc<Codec>> {
        if let Some(c) = self.loaded.lock().get(&(uid, module)) {
            return Ok(c.clone());
        }
        let wasm = read_module(&self.fs, &module)?;
        let owner = Owner {
            account: Some(account.clone()),
            ..Owner::process(0)
        };
        let codec = Codec::load_for(&self.runtime, owner, &wasm).map_err(|e| {
            let errno = match &e {
                vino_graft::LoadError::Limit(x) => Errno::from_number(x.errno()).unwrap_or(Errno::Again),
                _ => Errno::Io,
            };
            SysError::new(errno, format!("stream codec {}: {e}", module_name(&module)))
        })?;
        Ok(self
            .loaded
            .lock()
            .entry((uid, module))
            .or_insert(Arc::new(codec))
            .clone())
    }

    /// Unloads every codec (their keys go with them), giving their charges back: at shutdown,
    /// once nothing can need them. A later access loads a codec again (without its key).
    fn unload_all(&self) {
        for (_, codec) in self.loaded.lock().drain() {
            codec.slot().unload();
        }
    }
}

/// How often an unprivileged user may have the inode table scanned for stream files
/// ([`crate::Process::stream_dependencies`]): the scan reads every inode, so without a limit
/// any user could keep the file system's lock busy by asking in a loop.
pub const STREAM_SCAN_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The kernel's stream codecs and the stream files the cache knows.
pub struct Streams {
    pub(crate) codecs: Arc<Codecs>,
    files: Mutex<FxHashMap<u64, Arc<StreamFile>>>,
    /// When each user last had the inode table scanned (clock ns); one scan runs at a time.
    scans: Mutex<FxHashMap<u32, u64>>,
}

impl Streams {
    pub(crate) fn new(runtime: &Runtime, fs: &Arc<FileSystem>) -> Streams {
        Streams {
            codecs: Arc::new(Codecs {
                runtime: runtime.clone(),
                fs: fs.clone(),
                loaded: Mutex::default(),
            }),
            files: Mutex::default(),
            scans: Mutex::default(),
        }
    }

    /// Before `ino`'s data goes through the cache: if it is a stream file (of `generation`,
    /// owned by `uid`, codec `module`), the cache keeps it through its [`StreamFile`]; if not,
    /// it is no stream object (an inode number reused).
    pub(crate) fn prepare(
        &self,
        cache: &PageCache,
        ino: u64,
        generation: u32,
        stream: Option<(u32, ModuleId, Arc<Account>)>,
    ) {
        let mut files = self.files.lock();
        let Some((uid, module, account)) = stream else {
            if files.remove(&ino).is_some() {
                cache.detach_stream(ino);
            }
            return;
        };
        if files
            .get(&ino)
            .is_some_and(|f| f.generation == generation && f.uid == uid && f.module == module)
        {
            return;
        }
        let file = Arc::new(StreamFile {
            codecs: self.codecs.clone(),
            account,
            ino,
            generation,
            uid,
            module,
            io: Mutex::new(()),
        });
        files.insert(ino, file.clone());
        cache.attach_stream(ino, file);
    }

    /// Unloads every codec (see [`Codecs`]): the kernel is shutting down.
    pub fn unload_codecs(&self) {
        self.codecs.unload_all();
    }

    /// The file is gone (its pages were dropped): the cache forgets it.
    pub(crate) fn forget(&self, cache: &PageCache, ino: u64) {
        if self.files.lock().remove(&ino).is_some() {
            cache.detach_stream(ino);
        }
    }
}

/// Stores `wasm` in the module store (if it is not there), owned by and charged to `uid`;
/// returns its id.
pub(crate) fn store_module(fs: &FileSystem, uid: u32, gid: u32, wasm: &[u8]) -> SysResult<ModuleId> {
    let id = module_id(wasm);
    let mut dir = fs.root();
    for name in MODULE_DIR {
        dir = match fs.lookup(dir, name) {
            Ok(ino) => ino,
            Err(e) if e.kind() == vino_fs::FsErrorKind::NotFound => fs.mkdir(
                dir,
                name,
                &NewFile {
                    mode: 0o700,
                    ..NewFile::by(0)
                },
            )?,
            Err(e) => return Err(e.into()),
        };
    }
    let name = module_name(&id);
    if fs.lookup(dir, &name).is_ok() {
        return Ok(id);
    }
    let ino = fs.create(
        dir,
        &name,
        &NewFile {
            mode: 0o400,
            uid,
            gid,
            ..NewFile::by(0)
        },
    )?;
    if let Err(e) = fs.write_at(ino, 0, wasm).and_then(|_| fs.fsync(ino)) {
        let _ = fs.unlink(dir, &name);
        return Err(e.into());
    }
    Ok(id)
}

/// Where the module store keeps module `id`.
pub(crate) fn module_path(id: &ModuleId) -> String {
    format!("/{}/{}/{}", MODULE_DIR[0], MODULE_DIR[1], module_name(id))
}

/// A stored module's bytes, checked against its name.
fn read_module(fs: &FileSystem, id: &ModuleId) -> SysResult<Vec<u8>> {
    let path = module_path(id);
    let ino = fs
        .resolve(&path)
        .map_err(|_| SysError::new(Errno::Io, format!("stream codec module {path} is missing")))?;
    let size = fs.stat(ino)?.size as usize;
    let mut wasm = vec![0u8; size];
    let n = fs.read_at(ino, 0, &mut wasm)?;
    wasm.truncate(n);
    if module_id(&wasm) != *id {
        return Err(SysError::new(
            Errno::Io,
            format!("stream codec module {path} does not match its hash"),
        ));
    }
    Ok(wasm)
}

/// One stream file as the page cache sees it: reads and writes whole chunks through the codec
/// of its owner.
pub struct StreamFile {
    codecs: Arc<Codecs>,
    /// The owner's account: its codec's instance and CPU are charged there.
    account: Arc<Account>,
    ino: u64,
    generation: u32,
    uid: u32,
    module: ModuleId,
    /// Held across each fetch or store of chunks (not while the codec runs): a chunk read while
    /// another write of the file replaces chunks could find blocks freed and reused.
    io: Mutex<()>,
}

impl StreamFile {
    fn fs(&self) -> &FileSystem {
        &self.codecs.fs
    }

    /// The owner's codec (loaded on first need): a module that cannot be had fails the chunk.
    fn codec(&self) -> io::Result<Arc<Codec>> {
        self.codecs
            .get(self.uid, self.module, &self.account)
            .map_err(|e| io::Error::other(format!("inode {}: {e}", self.ino)))
    }

    /// A stored chunk's plain bytes into `buf` (zeros past its valid bytes, and for a hole).
    fn decode_into(&self, chunk: u64, stored: &vino_fs::StoredChunk, buf: &mut [u8]) -> io::Result<()> {
        buf.fill(0);
        let e = &stored.entry;
        if e.is_hole() {
            return Ok(());
        }
        let valid = e.valid_len as usize;
        if e.is_raw() {
            buf[..valid].copy_from_slice(&stored.coded[..valid]);
            return Ok(());
        }
        let plain = self
            .codec()?
            .decode(chunk, &stored.coded, &e.nonce, e.plain_len as usize)
            .map_err(|err| codec_error(self.ino, err))?;
        buf[..valid].copy_from_slice(&plain[..valid]);
        Ok(())
    }
}

/// A codec's failure as the system call sees it: EACCES while it has no key, else EIO.
fn codec_error(ino: u64, e: StreamError) -> io::Error {
    match e {
        StreamError::NeedKey => io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("inode {ino}: its stream codec has no key (its owner must give it one)"),
        ),
        StreamError::Failed(why) => io::Error::other(format!("inode {ino}: stream codec failed: {why}")),
    }
}

impl ChunkStore for StreamFile {
    fn chunk_pages(&self) -> u64 {
        (CHUNK_BYTES / vino_fs::BS) as u64
    }

    fn owner(&self) -> u32 {
        self.uid
    }

    fn read_chunk(&self, chunk: u64, buf: &mut [u8]) -> io::Result<()> {
        self.read_chunks(&[chunk], buf).remove(0)
    }

    /// Fetches the chunks' encoded bytes together ([`FileSystem::read_chunks`]), then decodes
    /// each into its part of `buf`, with the file's I/O lock no longer held: other chunks of
    /// the file may be fetched or stored meanwhile.
    fn read_chunks(&self, chunks: &[u64], buf: &mut [u8]) -> Vec<io::Result<()>> {
        let fetched = {
            let _io = self.io.lock();
            self.fs().read_chunks(self.ino, chunks)
        };
        let stored = match fetched {
            Ok(s) => s,
            Err(e) => return chunks.iter().map(|_| Err(io::Error::other(e.to_string()))).collect(),
        };
        let per = buf.len() / chunks.len().max(1);
        stored
            .iter()
            .zip(chunks)
            .zip(buf.chunks_mut(per.max(1)))
            .map(|((stored, &chunk), part)| self.decode_into(chunk, stored, part))
            .collect()
    }

    fn write_chunk(&self, chunk: u64, data: &[u8]) -> io::Result<()> {
        self.write_chunks(&[(chunk, data)]).remove(0)
    }

    /// Encodes each chunk, then stores those that encoded in one batch
    /// ([`FileSystem::write_chunks`]): one device request for them all where the blocks allow.
    /// The file's I/O lock is held only to store them, not while the codec runs (the cache
    /// never writes one chunk back from two threads at once).
    fn write_chunks(&self, chunks: &[(u64, &[u8])]) -> Vec<io::Result<()>> {
        let mut results: Vec<io::Result<()>> = chunks.iter().map(|_| Ok(())).collect();
        let size = match self.fs().stat(self.ino) {
            Ok(st) => st.size,
            Err(e) => return chunks.iter().map(|_| Err(io::Error::other(e.to_string()))).collect(),
        };
        let codec = match self.codec() {
            Ok(c) => c,
            Err(e) => {
                return chunks
                    .iter()
                    .map(|_| Err(io::Error::new(e.kind(), e.to_string())))
                    .collect();
            }
        };
        // (index into `chunks`, chunk, plain bytes, nonce, encoding)
        let mut encoded = Vec::with_capacity(chunks.len());
        for (i, &(chunk, data)) in chunks.iter().enumerate() {
            let start = chunk * CHUNK_BYTES as u64;
            if start >= size {
                continue;
            }
            let plain = &data[..(size - start).min(CHUNK_BYTES as u64) as usize];
            let nonce = vino_stream::fresh_nonce();
            match codec.encode(chunk, plain, &nonce) {
                Ok(e) => encoded.push((i, chunk, plain, nonce, e)),
                Err(err) => results[i] = Err(codec_error(self.ino, err)),
            }
        }
        if encoded.is_empty() {
            return results;
        }
        let batch: Vec<(u64, NewChunk<'_>)> = encoded
            .iter()
            .map(|(_, chunk, plain, nonce, e)| {
                let (coded, raw) = match e {
                    Encoded::Coded(bytes) => (&bytes[..], false),
                    Encoded::Raw => (*plain, true),
                };
                let new = NewChunk {
                    coded,
                    raw,
                    plain_len: plain.len(),
                    nonce: *nonce,
                };
                (*chunk, new)
            })
            .collect();
        let _io = self.io.lock();
        if let Err(e) = self.fs().write_chunks(self.ino, self.generation, &batch) {
            for (i, ..) in &encoded {
                results[*i] = Err(fs_io_error(&e));
            }
        }
        results
    }
}

/// A file system error as the cache's stores report it.
fn fs_io_error(e: &vino_fs::FsError) -> io::Error {
    match e {
        vino_fs::FsError::Io(e) => io::Error::new(e.kind(), e.to_string()),
        e => io::Error::new(io_kind(e), e.to_string()),
    }
}

fn io_kind(e: &vino_fs::FsError) -> io::ErrorKind {
    match e {
        vino_fs::FsError::NoSpace => io::ErrorKind::StorageFull,
        vino_fs::FsError::QuotaExceeded => io::ErrorKind::QuotaExceeded,
        _ => io::ErrorKind::Other,
    }
}

/// What [`Process::stream_status`] says of a stream file or directory.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StreamStatus {
    /// The codec's module (hex SHA-256).
    pub module: String,
    /// Whether the owner's codec is loaded now.
    pub loaded: bool,
}

impl crate::Process {
    /// Binds the stream codec `wasm` to the empty regular file or the directory at `path`
    /// (`None`: unbinds it). Only the file's owner may: the codec runs on everyone's reads of
    /// it. The module is checked (it must load as a `file.stream` graft) and kept by the kernel.
    pub fn stream_bind(&self, path: &str, wasm: Option<&[u8]>) -> SysResult<()> {
        self.stream_bind_at(crate::At::Root, path.as_bytes(), wasm)
    }

    /// The stream codec of the file or directory at `path`, if any.
    pub fn stream_status(&self, path: &str) -> SysResult<Option<StreamStatus>> {
        let kernel = self.kernel();
        let _ns = kernel.ns.read();
        let f = self.walk(crate::namei::At::Root, path.as_bytes(), true)?;
        Ok(f.stat.stream.map(|m| StreamStatus {
            module: module_name(&m),
            loaded: kernel.streams.codecs.loaded.lock().contains_key(&(f.stat.uid, m)),
        }))
    }

    /// Calls control function `name` of the owner's codec of the file at `path` (an encrypting
    /// codec's key is given this way). Only the file's owner may; each call runs in a
    /// transaction, as every control call does.
    pub fn stream_control(&self, path: &str, name: &str, args: &[i64]) -> SysResult<i64> {
        let kernel = self.kernel();
        let (uid, module) = {
            let _ns = kernel.ns.read();
            let f = self.walk(crate::namei::At::Root, path.as_bytes(), true)?;
            let module = f
                .stat
                .stream
                .ok_or_else(|| SysError::new(Errno::Inval, format!("{path} has no stream codec")))?;
            (f.stat.uid, module)
        };
        if self.credentials().uid != uid {
            return Err(SysError::new(
                Errno::Perm,
                format!("only the owner of {path} controls its stream codec"),
            ));
        }
        let codec = kernel.streams.codecs.get(uid, module, &kernel.accounts.user(uid))?;
        Ok(codec.slot().call_control(name, args)?)
    }
}

impl crate::Kernel {
    /// Before a file's data goes through the cache: a stream file's chunks go through its
    /// codec; any other file is no stream object.
    pub(crate) fn prepare_stream(&self, st: &vino_fs::Stat) {
        let stream = st
            .stream
            .filter(|_| st.kind == vino_fs::FileType::Regular)
            .map(|m| (st.uid, m, self.accounts.user(st.uid)));
        self.streams.prepare(&self.cache, st.ino, st.generation, stream);
    }

    /// The kernel's stream codecs and files (for `vino graft`, statistics).
    pub fn streams(&self) -> &Streams {
        &self.streams
    }
}

/// A file or directory that depends on a stream codec's module.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StreamDependency {
    pub ino: u64,
    pub uid: u32,
    /// `regular` or `directory`.
    pub kind: String,
    /// The module (hex SHA-256).
    pub module: String,
    /// Whether its owner's codec is loaded now.
    pub loaded: bool,
}

impl crate::Process {
    /// The loaded stream codecs of this process's user (all, for a privileged process), as
    /// slots for [`crate::Process::graft_list`]: `file.stream/uid<U>/<module>` with the codec's
    /// counters (`vino stream ls` names the files that depend on each module).
    pub(crate) fn stream_slots(&self) -> Vec<vino_graft::SlotInfo> {
        let cred = self.credentials();
        // Taken out first: every chunk a reader decodes looks its codec up under this lock.
        let visible: Vec<_> = self
            .kernel()
            .streams
            .codecs
            .loaded
            .lock()
            .iter()
            .filter(|((uid, _), _)| cred.privileged || *uid == cred.uid)
            .map(|(&key, codec)| (key, codec.clone()))
            .collect();
        let mut slots: Vec<_> = visible
            .into_iter()
            .map(|((uid, module), codec)| vino_graft::SlotInfo {
                point: format!("{}/uid{uid}/{}", vino_stream::FileStream::NAME, module_name(&module)),
                ..codec.slot().info()
            })
            .collect();
        slots.sort_by(|a, b| a.point.cmp(&b.point));
        slots
    }

    /// Which files depend on which stream codec module: the caller's own files, or every one
    /// for a privileged caller (others' files are not a user's to enumerate). EAGAIN for an
    /// unprivileged caller who asked less than [`STREAM_SCAN_EVERY`] ago.
    pub fn stream_dependencies(&self) -> SysResult<Vec<StreamDependency>> {
        let kernel = self.kernel();
        let cred = self.credentials();
        let inodes = {
            // Held over the scan: one at a time, whoever asks.
            let mut scans = kernel.streams.scans.lock();
            let now = kernel.clock.now_ns();
            let every = STREAM_SCAN_EVERY.as_nanos() as u64;
            scans.retain(|_, &mut at| now.saturating_sub(at) < every);
            if !cred.privileged
                && let Some(&at) = scans.get(&cred.uid)
            {
                let wait = (every - now.saturating_sub(at)).div_ceil(1_000_000);
                return Err(SysError::new(
                    Errno::Again,
                    format!("listing stream files scans every inode: once a second per user (try again in {wait} ms)"),
                ));
            }
            scans.insert(cred.uid, now);
            kernel.fs().stream_inodes()?
        };
        let loaded = kernel.streams.codecs.loaded.lock().keys().copied().collect::<Vec<_>>();
        Ok(inodes
            .into_iter()
            .filter(|s| cred.privileged || s.uid == cred.uid)
            .map(|s| StreamDependency {
                ino: s.ino,
                uid: s.uid,
                kind: if s.kind == vino_fs::FileType::Directory {
                    "directory"
                } else {
                    "regular"
                }
                .into(),
                module: module_name(&s.module),
                loaded: loaded.contains(&(s.uid, s.module)),
            })
            .collect())
    }

    /// Removes the stored modules no file or directory names any more (privileged callers
    /// only); returns how many went. A module bound again later is stored again.
    pub fn collect_stream_modules(&self) -> SysResult<usize> {
        if !self.credentials().privileged {
            return Err(SysError::new(
                Errno::Perm,
                "only a privileged process collects stream modules",
            ));
        }
        let kernel = self.kernel();
        let fs = kernel.fs();
        let _ns = kernel.ns.write();
        let used: std::collections::BTreeSet<String> =
            fs.stream_inodes()?.iter().map(|s| module_name(&s.module)).collect();
        let Ok(dir) = fs.resolve(format!("/{}/{}", MODULE_DIR[0], MODULE_DIR[1])) else {
            return Ok(0);
        };
        let mut removed = 0;
        for entry in fs.readdir(dir)? {
            let name = entry.name_lossy();
            if name == "." || name == ".." || used.contains(&name) {
                continue;
            }
            fs.unlink(dir, &entry.name)?;
            removed += 1;
        }
        Ok(removed)
    }
}
