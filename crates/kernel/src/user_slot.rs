//! A user's binding of a graftpoint (`exec.verify/user`, `net.pick_packet/user`) as one of its
//! processes sees it: any process of the uid may load or unload it, and a graft loaded there is
//! charged to the user's account, since it outlives the process that loaded it (the kernel keeps
//! it until it is unloaded or the kernel stops).

use crate::Account;
use std::sync::Arc;
use vino_graft::{Access, GraftInfo, LoadError, ManagedSlot, Owner, SlotWrapper};

pub(crate) struct UserSlot {
    /// The user's slot (one for all its processes).
    pub(crate) slot: Arc<dyn ManagedSlot>,
    /// The process whose namespace this is: it may graft the slot.
    pub(crate) pid: u64,
    pub(crate) user: Arc<Account>,
}

impl SlotWrapper for UserSlot {
    fn inner(&self) -> &dyn ManagedSlot {
        &*self.slot
    }

    fn access(&self) -> Access {
        Access::Process(self.pid)
    }

    fn load(&self, wasm: &[u8], owner: Owner) -> Result<GraftInfo, LoadError> {
        let owner = Owner {
            account: Some(self.user.clone()),
            ..owner
        };
        self.inner().load(wasm, owner)
    }
}
