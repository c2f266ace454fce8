//! What the network stack asks the kernel about its users: their weights on the host link (their
//! CPU tickets, so the link is shared by the rule that shares the CPU), their share of the
//! stack's thread for their grafts, and the `net.pick_packet` grafts, the link's (privileged)
//! and each user's own (`net.pick_packet/user`). See `vino_net::egress`.

use crate::CpuScheduler;
use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use std::sync::{Arc, OnceLock, Weak};
use vino_graft::{Access, GraftSlot, Runtime};
use vino_net::congestion::StackShare;
use vino_net::egress::{PickPacket, Sharing, UserPick};

/// The name of a user's own binding, as a process's namespace holds it.
pub const USER_POINT: &str = "net.pick_packet/user";

pub(crate) struct NetSharing {
    runtime: Runtime,
    /// The link's graft (privileged processes bind it).
    pub(crate) link: Arc<GraftSlot<PickPacket>>,
    /// Each user's own graft, made on first use.
    users: Mutex<FxHashMap<u32, Arc<GraftSlot<PickPacket>>>>,
    /// Each user's share of the stack's thread for its grafts (congestion and packet order).
    shares: Mutex<FxHashMap<u32, Arc<StackShare>>>,
    /// The CPU scheduler, whose user tickets are the weights (set once the kernel is made).
    cpu: OnceLock<Weak<CpuScheduler>>,
}

impl NetSharing {
    pub(crate) fn new(runtime: &Runtime) -> NetSharing {
        NetSharing {
            runtime: runtime.clone(),
            link: Arc::new(GraftSlot::new(runtime, Arc::new(()), Access::Privileged, None)),
            users: Mutex::default(),
            shares: Mutex::default(),
            cpu: OnceLock::new(),
        }
    }

    pub(crate) fn set_cpu(&self, cpu: &Arc<CpuScheduler>) {
        let _ = self.cpu.set(Arc::downgrade(cpu));
    }

    /// User `uid`'s own slot, made on first use.
    pub(crate) fn user(&self, uid: u32) -> Arc<GraftSlot<PickPacket>> {
        self.users
            .lock()
            .entry(uid)
            .or_insert_with(|| {
                Arc::new(GraftSlot::new(
                    &self.runtime,
                    Arc::new(()),
                    Access::Privileged,
                    Some("user"),
                ))
            })
            .clone()
    }

    /// `uid`'s share of the stack's thread (one for all its processes, so more processes buy
    /// no more of it).
    pub(crate) fn share(&self, uid: u32) -> Arc<StackShare> {
        self.shares.lock().entry(uid).or_default().clone()
    }

    /// Unloads every binding (the kernel stops).
    pub(crate) fn unload_all(&self) {
        for slot in self.users.lock().values() {
            slot.unload();
        }
        self.link.unload();
    }
}

impl Sharing for NetSharing {
    fn weight(&self, uid: u32) -> u32 {
        self.cpu
            .get()
            .and_then(Weak::upgrade)
            .map_or(vino_net::egress::DEFAULT_WEIGHT, |cpu| cpu.user_tickets(uid))
    }

    fn user_pick(&self, uid: u32) -> Option<UserPick> {
        let slot = self.users.lock().get(&uid).cloned()?;
        Some(UserPick {
            slot,
            share: self.share(uid),
        })
    }

    fn link_pick(&self) -> Option<Arc<GraftSlot<PickPacket>>> {
        Some(self.link.clone())
    }
}
