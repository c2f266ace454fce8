//! Stream codecs bound from any starting point of a walk (a program's directory, a node of the
//! mount), and by the module's name: a module the kernel's module store already holds (bound
//! before) bound to another file by its hash. The FUSE mount binds this way: a `setxattr`
//! carries a few bytes, not a module, and the hash a `getxattr` reports on one stream file binds
//! the same codec to another.

use crate::error::{Errno, SysError};
use crate::{At, SysResult};
use vino_fs::ModuleId;

/// A module's hash written in hex (64 digits, as [`crate::module_name`] writes it).
pub fn parse_module_name(hex: &[u8]) -> Option<ModuleId> {
    if hex.len() != 64 {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16);
    let mut id = [0u8; 32];
    for (i, b) in id.iter_mut().enumerate() {
        *b = (digit(hex[2 * i])? * 16 + digit(hex[2 * i + 1])?) as u8;
    }
    Some(id)
}

impl crate::Process {
    /// [`crate::Process::stream_bind`] from any starting point of a walk (a program's
    /// directory, which it may not leave): checks `wasm` as a codec and stores it first.
    pub fn stream_bind_at(&self, at: At, path: &[u8], wasm: Option<&[u8]>) -> SysResult<()> {
        let module = match wasm {
            None => None,
            Some(wasm) => {
                let kernel = self.kernel();
                let cred = self.credentials();
                // The owner's right is checked before the module costs a compile.
                let owner = self.stat_at(at, path, true)?.uid;
                if cred.uid != owner {
                    return Err(SysError::new(
                        Errno::Perm,
                        "only the file's owner binds its stream codec",
                    ));
                }
                // Checked as the binder's own graft: its compile is charged to the caller.
                vino_stream::Codec::load_for(&kernel.runtime, self.graft_owner(), wasm)
                    .map_err(|e| SysError::new(Errno::Inval, format!("not a stream codec: {e}")))?;
                Some(crate::streams::store_module(kernel.fs(), cred.uid, cred.gid, wasm)?)
            }
        };
        self.stream_bind_stored_at(at, path, module)
    }

    /// Binds the stored codec `module` to the empty regular file or the directory at `path`
    /// from `at` (`None`: unbinds it), as [`crate::Process::stream_bind`] does with a module's
    /// bytes; `ENOENT` if the module store does not hold it.
    pub fn stream_bind_stored_at(&self, at: At, path: &[u8], module: Option<ModuleId>) -> SysResult<()> {
        let kernel = self.kernel();
        if let Some(id) = &module {
            // The store's path, as `streams` keeps it; the codec loads (its hash checked) on
            // the file's first access.
            let stored = crate::streams::module_path(id);
            kernel.fs().resolve(&stored).map_err(|_| {
                SysError::new(
                    Errno::NoEnt,
                    format!(
                        "no stream codec {} is stored (bind it by its bytes first)",
                        crate::module_name(id)
                    ),
                )
            })?;
        }
        let _ns = kernel.ns.read();
        let f = self.walk(at, path, true)?;
        if self.credentials().uid != f.stat.uid {
            return Err(SysError::new(
                Errno::Perm,
                "only the file's owner binds its stream codec",
            ));
        }
        {
            let _writer = kernel.files.write_lock(f.ino);
            kernel.fs().bind_stream(f.ino, module)?;
        }
        let st = kernel.fs().stat(f.ino)?;
        kernel.prepare_stream(&st);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_module_name_reads_back_as_its_hash() {
        let id: vino_fs::ModuleId = std::array::from_fn(|i| (i * 37) as u8);
        let name = crate::module_name(&id);
        assert_eq!(super::parse_module_name(name.as_bytes()), Some(id));
        assert_eq!(super::parse_module_name(name.to_uppercase().as_bytes()), Some(id));
        assert_eq!(super::parse_module_name(&name.as_bytes()[1..]), None);
        assert_eq!(super::parse_module_name(&[b'g'; 64]), None);
    }
}
