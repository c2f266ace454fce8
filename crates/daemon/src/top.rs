//! The `Top` snapshot: every process's accounts and every bound graft, as far as the asking
//! process may see them: a privileged process sees all; another sees the processes of its own
//! uid and the grafts they loaded, and nothing of other users' (their clients, files, grafts).

use crate::Daemon;
use crate::dispatch::graft_stats;
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use vino_graft::{PolicyKind, SlotInfo};
use vino_kernel::{Credentials, Kernel, Pid};
use vino_proto::{CacheTop, EgressTop, GraftTop, Held, NetTop, ProcessTop, Top, UserTop};

fn graft_row(s: &SlotInfo, scope: String) -> Option<GraftTop> {
    let g = s.graft.as_ref()?;
    let st = graft_stats(s.stats.clone().unwrap_or_default());
    Some(GraftTop {
        point: s.point.clone(),
        owner: g.owner,
        scope,
        hash: g.hash.clone(),
        invocations: st.invocations,
        time_ns: st.time_ns,
        aborts: st.aborts,
    })
}

impl Daemon {
    /// A snapshot of every process and every bound graft.
    pub fn top(&self) -> Top {
        self.top_for(&Credentials::root())
    }

    /// A snapshot of the processes and grafts `viewer` may see: all if it is privileged, else
    /// the processes of its uid and the grafts they loaded.
    pub fn top_for(&self, viewer: &Credentials) -> Top {
        let kernel = &self.kernel;
        let sees = |owner: Pid| kernel.sees(viewer, owner);
        let global = kernel.global_grafts();
        let global_names: HashSet<&str> = global.iter().map(|s| s.point.as_str()).collect();
        let mut file_grafts = kernel.file_grafts();
        file_grafts.retain(|f| sees(f.owner));
        let mut grafts: Vec<GraftTop> = global
            .iter()
            .filter(|s| s.graft.as_ref().is_some_and(|g| sees(g.owner)))
            .filter_map(|s| graft_row(s, "global".into()))
            .collect();
        let mut processes = Vec::new();
        for p in kernel.processes() {
            if !viewer.privileged && p.credentials().uid != viewer.uid {
                continue;
            }
            let pid = p.pid();
            let mut row = ProcessTop {
                pid,
                ..Default::default()
            };
            // The process's own graftpoints whose graft it loaded (file-wide grafts reached its
            // descriptors too, but they are counted with the file below).
            let own: Vec<SlotInfo> = p
                .graft_list()
                .into_iter()
                .filter(|s| !global_names.contains(s.point.as_str()) && s.policy == PolicyKind::Wasm)
                .filter(|s| s.graft.as_ref().is_some_and(|g| g.owner == pid))
                .collect();
            for s in own.iter().chain(
                global
                    .iter()
                    .filter(|s| s.graft.as_ref().is_some_and(|g| g.owner == pid)),
            ) {
                let st = s.stats.clone().unwrap_or_default();
                row.grafts += 1;
                row.graft_invocations += st.invocations;
                row.graft_time_ns += st.time_ns;
                row.graft_aborts += st.failures;
            }
            for f in file_grafts.iter().filter(|f| f.owner == pid) {
                row.grafts += 1;
                row.graft_invocations += f.stats.invocations;
                row.graft_time_ns += f.stats.time_ns;
                row.graft_aborts += f.stats.failures;
            }
            grafts.extend(own.iter().filter_map(|s| graft_row(s, format!("process {pid}"))));
            let cache = p.cache_counters();
            row.cache_hits = cache.hits;
            row.cache_misses = cache.misses;
            row.cache_frames = p.cache_resident() as u64;
            row.open_files = p.fds().len() as u64;
            row.memory_bytes = p.account().used(vino_kernel::account::Resource::ProgramMemory);
            if let Some(m) = p.memory_stats() {
                row.memory = vino_proto::MemoryTop {
                    resident: m.resident,
                    swapped: m.swapped,
                    zero_faults: m.zero_faults,
                    minor_faults: m.minor_faults,
                    swap_ins: m.swap_ins,
                    swap_outs: m.swap_outs,
                    faulted_around: m.faulted_around,
                    evicted_by_graft: m.evicted_by_graft,
                    graft_refused: m.graft_refused,
                };
            }
            let cred = p.credentials();
            (row.uid, row.gid, row.privileged) = (cred.uid, cred.gid, cred.privileged);
            if let Some(prog) = self.programs.lock().get(&pid) {
                row.program = Some(prog.name.clone());
                row.cpu_ns = prog.cpu_ns();
                (row.bytes_read, row.bytes_written) = p.io_bytes();
            }
            row.digest = p.exec_digest();
            row.sockets = kernel
                .sockets_of(pid)
                .into_iter()
                .map(|s| vino_proto::SocketTop {
                    proto: s.proto.into(),
                    local: s.local.to_string(),
                    remote: s.remote.map(|r| r.to_string()),
                    state: s.state,
                    pending: s.pending as u64,
                })
                .collect();
            row.tickets = p.tickets().unwrap_or(0);
            row.threads = p.threads().len() as u64;
            if let Some(c) = self.conns.lock().get(&pid) {
                row.host_pid = c.peer.pid;
                row.client = c.client.clone();
                row.syscalls = c.account.syscalls.load(Ordering::Relaxed);
                row.bytes_read = c.account.bytes_read.load(Ordering::Relaxed);
                row.bytes_written = c.account.bytes_written.load(Ordering::Relaxed);
            }
            processes.push(row);
        }
        grafts.extend(file_grafts.iter().map(|f| GraftTop {
            point: f.point.clone(),
            owner: f.owner,
            scope: format!("file {}", f.path),
            hash: f.hash.clone(),
            invocations: f.stats.invocations,
            time_ns: f.stats.time_ns,
            aborts: f.stats.failures,
        }));
        let cs = kernel.cache_stats();
        let cache = CacheTop {
            frames: cs.frames as u64,
            resident: cs.resident as u64,
            dirty: cs.dirty as u64,
            hits: cs.total.hits,
            misses: cs.total.misses,
        };
        Top {
            uptime_ms: self.started.elapsed().as_millis() as u64,
            connections: self.connections() as u64,
            processes,
            grafts,
            cache,
            users: users(kernel, viewer),
            mounts: self.mounts(viewer.privileged),
            net: kernel.host_link_stats().filter(|_| viewer.privileged).map(net_top),
        }
    }
}

/// The host link's counts, as `Top` shows them.
fn net_top(h: vino_kernel::HostStats) -> NetTop {
    NetTop {
        sent: h.sent,
        refused: h.refused,
        received: h.received,
        martians: h.martians,
        shaped: h.shaped.map(|e| EgressTop {
            queued: e.queued,
            sent: e.sent,
            dropped: e.dropped,
            user_picks: e.user_picks,
            link_picks: e.link_picks,
            users_waiting: e.users as u64,
            waiting_bytes: e.waiting_bytes as u64,
        }),
    }
}

/// The accounts of the users `viewer` may see (the kernel decides which).
fn users(kernel: &Kernel, viewer: &Credentials) -> Vec<UserTop> {
    kernel
        .user_accounts(viewer)
        .into_iter()
        .map(|a| UserTop {
            uid: a.uid,
            held: a
                .held
                .into_iter()
                .map(|(r, used, limit)| Held {
                    resource: format!("{r:?}"),
                    used,
                    limit,
                })
                .collect(),
            cpu_ns: a.cpu_ns,
            work_ns: a.work_ns,
        })
        .collect()
}
