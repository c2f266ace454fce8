//! Every graftpoint of the kernel, in one place.
//!
//! Each entry is derived from the [`GraftPoint`] type the subsystem declares: its name, entry
//! point, Wasm signature, graft-callable functions, use of the argument area and CPU budget come
//! from the type, so they cannot drift from what a load checks. The registry adds only what the
//! type does not say: who may graft it, what it decides, and where the seeds describe it. Each
//! entry also carries [`check_module`] for its type, so a module can be checked against any
//! graftpoint by name without the kernel object (`vino graft check`).
//!
//! `docs/graft-abi.md` holds the table [`render_markdown`] draws (`vino graft points --markdown`);
//! a test fails when the two differ.

use serde::ser::{Serialize, SerializeStruct, Serializer};
use std::fmt::Write as _;
use std::time::Duration;
use vino_graft::{GraftPoint, LoadError, ModuleSummary, Runtime, Signature, check_module, export_name};

pub use crate::dir_grafts::{DirAccess, DirLookup};
pub use crate::events::{CloseEvent, CreateEvent, ModifyEvent, OpenEvent, UnlinkEvent};
pub use crate::exec_verify::ExecVerify;
pub use crate::net_server::PacketEvent;
pub use vino_cache::{Candidates, ComputeRa, PickVictim, VictimEnv, Writeback};
pub use vino_fs::BlockBuddy;
pub use vino_iosched::PickRequest;
pub use vino_locks::LockGrant;
pub use vino_net::{Congestion, PickPacket};
pub use vino_sched::{PickNext, PickThread, Timer};
pub use vino_stream::FileStream;
pub use vino_vm::FaultAround;

/// Who may graft a graftpoint (Small 1998, 3.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Grafter {
    /// Privileged processes only: a global graftpoint.
    Privileged,
    /// The process whose pages are in question: each process has its own.
    PageOwner,
    /// The process that opened the descriptor: one per open file.
    Opener,
    /// The process that created the file (recorded in its inode): one per file.
    FileCreator,
    /// The process that created the file, or a privileged process: one per file.
    FileCreatorOrPrivileged,
    /// The process itself, for its own threads, timer, lookups and connections: one per process.
    Process,
    /// The process itself, hearing of events on files it may read that pass its own filters.
    Listener,
    /// The file's owner: one per bound file or directory.
    FileOwner,
    /// The directory's owner, for the tree under it: one per bound directory.
    DirectoryOwner,
    /// Privileged processes (global), or any process of a user for that user's own programs.
    PrivilegedOrUser,
    /// The process serving the port: one per served port.
    Server,
}

impl Grafter {
    pub fn describe(self) -> &'static str {
        match self {
            Grafter::Privileged => "privileged processes (global)",
            Grafter::PageOwner => "the process whose pages they are (one per process)",
            Grafter::Opener => "the process that opened the descriptor (one per open file)",
            Grafter::FileCreator => "the process that created the file (one per file)",
            Grafter::FileCreatorOrPrivileged => {
                "the process that created the file, or a privileged process (one per file)"
            }
            Grafter::Process => {
                "the process itself, for its own threads, timer, lookups and connections (one per process)"
            }
            Grafter::Listener => "the process itself, for events on files it may read that pass its filters",
            Grafter::FileOwner => "the file's owner (one per bound file or directory)",
            Grafter::DirectoryOwner => "the directory's owner, for the tree under it (one per bound directory)",
            Grafter::PrivilegedOrUser => {
                "privileged processes (global), or any process of a user for its own programs or packets (`<name>/user`, one per user)"
            }
            Grafter::Server => "the process serving the port (`Process::net_serve`, one per served port)",
        }
    }
}

/// Checks a module against one graftpoint's type: [`check_module`] for that type.
pub type CheckFn = fn(&Runtime, &[u8]) -> Result<ModuleSummary, LoadError>;

/// One graftpoint of the kernel.
#[derive(Clone, Copy)]
pub struct Graftpoint {
    /// `subsystem.function`; per-object slots are reached as `<name>/<fd>`.
    pub name: &'static str,
    /// The Wasm signature of the entry point.
    pub signature: Signature,
    /// Graft-callable functions besides the ones every graft may call (`vino_now_ns`, `vino_log`).
    pub callable: &'static [&'static str],
    /// True if arguments or the decision pass through the graft's `vino_args` area.
    pub uses_arg_area: bool,
    /// Bytes of that area.
    pub arg_bytes: usize,
    /// True if its grafts may read the clock (`vino_now_ns`).
    pub clock: bool,
    /// True if a failed call's writes to the graft's own memory are undone
    /// ([`vino_graft::GraftPoint::ROLL_BACK_MEMORY`]).
    pub roll_back_memory: bool,
    /// True if its grafts are compiled with the checks that stop one mid-call when its
    /// transaction passes a lock-holding deadline ([`vino_graft::GraftPoint::DEADLINE_CHECKS`]).
    pub deadline_checks: bool,
    pub who: Grafter,
    /// CPU budget of one invocation (the runtime's invocation budget caps it).
    pub budget: Duration,
    /// What it decides, in one line.
    pub meaning: &'static str,
    /// Where the seeds describe it.
    pub section: &'static str,
    /// Checks a module against it, without the kernel object.
    pub check: CheckFn,
}

impl Graftpoint {
    /// The function a graft exports for it (`vas_pick_victim`).
    pub fn export(&self) -> String {
        export_name(self.name)
    }

    /// The entry point with its signature: `vas_pick_victim(i32) -> i32`.
    pub fn entry(&self) -> String {
        format!("{}{}", self.export(), self.signature)
    }
}

impl std::fmt::Debug for Graftpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graftpoint")
            .field("name", &self.name)
            .field("signature", &self.signature)
            .field("callable", &self.callable)
            .field("uses_arg_area", &self.uses_arg_area)
            .field("arg_bytes", &self.arg_bytes)
            .field("clock", &self.clock)
            .field("roll_back_memory", &self.roll_back_memory)
            .field("deadline_checks", &self.deadline_checks)
            .field("who", &self.who)
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

impl Serialize for Graftpoint {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("Graftpoint", 16)?;
        st.serialize_field("name", self.name)?;
        st.serialize_field("export", &self.export())?;
        st.serialize_field("signature", &self.signature.to_string())?;
        st.serialize_field("params", self.signature.params)?;
        st.serialize_field("results", self.signature.results)?;
        st.serialize_field("callable", self.callable)?;
        st.serialize_field("uses_arg_area", &self.uses_arg_area)?;
        st.serialize_field("arg_bytes", &self.arg_bytes)?;
        st.serialize_field("clock", &self.clock)?;
        st.serialize_field("roll_back_memory", &self.roll_back_memory)?;
        st.serialize_field("deadline_checks", &self.deadline_checks)?;
        st.serialize_field("who", &self.who)?;
        st.serialize_field("who_description", self.who.describe())?;
        st.serialize_field("budget_ns", &(self.budget.as_nanos() as u64))?;
        st.serialize_field("meaning", self.meaning)?;
        st.serialize_field("section", self.section)?;
        st.end()
    }
}

/// The entry of graftpoint type `G`.
const fn entry<G: GraftPoint>(who: Grafter, meaning: &'static str, section: &'static str) -> Graftpoint {
    Graftpoint {
        name: G::NAME,
        signature: Signature::of::<G>(),
        callable: G::CALLABLE,
        uses_arg_area: G::USES_ARG_AREA,
        arg_bytes: G::ARG_BYTES,
        clock: G::CLOCK,
        roll_back_memory: G::ROLL_BACK_MEMORY,
        deadline_checks: G::DEADLINE_CHECKS,
        who,
        budget: G::BUDGET,
        meaning,
        section,
        check: check_module::<G>,
    }
}

const EVENTS: &str = "Small 1998, 3.5 and 7.4";

/// Every graftpoint of the kernel.
pub static GRAFTPOINTS: [Graftpoint; 22] = [
    entry::<PickVictim>(
        Grafter::PageOwner,
        "which of its own pages a process gives up when the cache needs a frame or its memory is over its share",
        "Small 1998, 2.2 and 7.7.1",
    ),
    entry::<FaultAround>(
        Grafter::PageOwner,
        "which neighbouring pages of its memory come in with a page fault",
        "Small 1998, 2.2",
    ),
    entry::<ComputeRa>(
        Grafter::Opener,
        "what to read ahead after each read of an open file",
        "Small 1998, 7.7.2; Seltzer et al. 1995, 4.3",
    ),
    entry::<Writeback>(
        Grafter::Privileged,
        "which dirty pages to write now, about once a second",
        "Seltzer et al. 1995, 3",
    ),
    entry::<BlockBuddy>(
        Grafter::FileCreator,
        "where a newly allocated block of a file goes",
        "Small 1998, 7.5 and 7.7.7",
    ),
    entry::<PickRequest>(
        Grafter::Privileged,
        "which waiting request the device serves next",
        "Small 1998, 4.2.1",
    ),
    entry::<FileStream>(
        Grafter::FileOwner,
        "how a file's chunks are encoded on their way to the device and decoded on their way back (compression, encryption, integrity); the same grafts are a connection's layers (`Process::socket_push`)",
        "Small 1998, 4.2",
    ),
    entry::<LockGrant>(
        Grafter::FileCreatorOrPrivileged,
        "which waiting byte-range lock requests on a file to grant",
        "Seltzer et al. 1995, 4.4",
    ),
    entry::<PickNext>(
        Grafter::Privileged,
        "which runnable thread a worker runs next",
        "Small 1998, 2 and 4.2.1",
    ),
    entry::<PickThread>(
        Grafter::Process,
        "which of the process's runnable threads runs on its turn",
        "Small 1998, 4.2.1",
    ),
    entry::<Timer>(
        Grafter::Process,
        "periodic work of the process, fired by its timer (Process::timer_start)",
        "Small 1998, 3.5",
    ),
    entry::<OpenEvent>(
        Grafter::Listener,
        "a file was opened (the open that creates it included)",
        EVENTS,
    ),
    entry::<CloseEvent>(Grafter::Listener, "a descriptor of a file was closed", EVENTS),
    entry::<CreateEvent>(Grafter::Listener, "a file was created", EVENTS),
    entry::<UnlinkEvent>(
        Grafter::Listener,
        "a name was unlinked (a file replaced by a rename included)",
        EVENTS,
    ),
    entry::<ModifyEvent>(
        Grafter::Listener,
        "a file was written or truncated (write, pwrite, ftruncate)",
        EVENTS,
    ),
    entry::<DirAccess>(
        Grafter::DirectoryOwner,
        "whether a lookup, open or change of a name in the tree may go on (it may only refuse; a failure refuses)",
        "Small 1998, 4.2",
    ),
    entry::<DirLookup>(
        Grafter::Process,
        "another path to look up in place of a name the process's walk looks up",
        "Small 1998, 4.2",
    ),
    entry::<Congestion>(
        Grafter::Process,
        "how the congestion windows of its TCP connections follow acknowledgements, losses and timeouts",
        "Linux's tcp_congestion_ops, open to every process for its own connections",
    ),
    entry::<PacketEvent>(
        Grafter::Server,
        "what a server in the kernel does with a connection's bytes: send bytes or a file's range, close",
        "Small 1998, 3.5 and 4.2",
    ),
    entry::<PickPacket>(
        Grafter::PrivilegedOrUser,
        "which packet goes next on the host link when it has a rate: among users (the link's), or among a user's own flows (`/user`, within its share)",
        "Small 1998, 3.5",
    ),
    entry::<ExecVerify>(
        Grafter::PrivilegedOrUser,
        "whether a program may run, from a digest of its module's bytes streamed through the graft",
        "Small 1998, 4.2",
    ),
];

/// Every graftpoint of the kernel.
pub fn all() -> &'static [Graftpoint] {
    &GRAFTPOINTS
}

/// The graftpoint named `name`; a slot's name (`file.compute_ra/3`) finds its graftpoint.
pub fn find(name: &str) -> Option<&'static Graftpoint> {
    let base = name.split_once('/').map_or(name, |(base, _)| base);
    GRAFTPOINTS.iter().find(|g| g.name == base)
}

/// The names of every graftpoint, in the registry's order.
pub fn names() -> Vec<&'static str> {
    GRAFTPOINTS.iter().map(|g| g.name).collect()
}

/// A budget in words: `10 ms`, `100 µs`.
pub fn budget_text(budget: Duration) -> String {
    let ns = budget.as_nanos();
    if ns.is_multiple_of(1_000_000) {
        format!("{} ms", ns / 1_000_000)
    } else if ns.is_multiple_of(1_000) {
        format!("{} µs", ns / 1_000)
    } else {
        format!("{ns} ns")
    }
}

/// The line before the generated table in `docs/graft-abi.md`.
pub const DOC_BEGIN: &str = "<!-- graftpoints:begin -->";
/// The line after it.
pub const DOC_END: &str = "<!-- graftpoints:end -->";

/// The registry as a Markdown table, as `docs/graft-abi.md` holds it between [`DOC_BEGIN`] and
/// [`DOC_END`].
pub fn render_markdown() -> String {
    let mut out = String::new();
    out.push_str(
        "| graftpoint | entry point | imports besides `vino_now_ns`, `vino_log` | argument area \
         | who may graft | budget | decides (seed) |\n",
    );
    out.push_str("| --- | --- | --- | --- | --- | --- | --- |\n");
    for g in &GRAFTPOINTS {
        let mut callable = if g.callable.is_empty() {
            "none".to_string()
        } else {
            g.callable
                .iter()
                .map(|c| format!("`{c}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if !g.clock {
            callable.push_str("; no `vino_now_ns`");
        }
        let area = match (g.uses_arg_area, g.arg_bytes) {
            (false, _) => "none".to_string(),
            (true, vino_graft::ARG_BYTES) => "`vino_args`".to_string(),
            (true, bytes) => format!("`vino_args`, {bytes} bytes"),
        };
        // What sets the graftpoint's calls apart from the rest (see the Failure section).
        let mut budget = budget_text(g.budget);
        if !g.roll_back_memory {
            budget.push_str("; memory not rolled back");
        }
        if !g.deadline_checks {
            budget.push_str("; no deadline checks");
        }
        let _ = writeln!(
            out,
            "| `{}` | `{}` | {callable} | {} | {} | {budget} | {} ({}) |",
            g.name,
            g.entry(),
            area,
            g.who.describe(),
            g.meaning,
            g.section,
        );
    }
    out
}

/// `doc` with the text between its [`DOC_BEGIN`] and [`DOC_END`] lines replaced by
/// [`render_markdown`]; `None` if it lacks the markers.
pub fn splice_markdown(doc: &str) -> Option<String> {
    let begin = doc.find(DOC_BEGIN)? + DOC_BEGIN.len();
    let end = begin + doc[begin..].find(DOC_END)?;
    Some(format!("{}\n{}{}", &doc[..begin], render_markdown(), &doc[end..]))
}

/// The text between the markers of `doc`, if it has them.
pub fn generated_section(doc: &str) -> Option<&str> {
    let begin = doc.find(DOC_BEGIN)? + DOC_BEGIN.len();
    let end = begin + doc[begin..].find(DOC_END)?;
    Some(doc[begin..end].strip_prefix('\n').unwrap_or(&doc[begin..end]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn doc_path() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/graft-abi.md")
    }

    #[test]
    fn names_are_unique_and_found_by_slot_name() {
        let names: BTreeSet<_> = names().into_iter().collect();
        assert_eq!(names.len(), GRAFTPOINTS.len());
        assert_eq!(find("file.compute_ra/3").map(|g| g.name), Some("file.compute_ra"));
        assert_eq!(find("lock.grant/0").map(|g| g.name), Some("lock.grant"));
        assert_eq!(find("event.fs.unlink").map(|g| g.name), Some("event.fs.unlink"));
        assert!(find("toy.apply").is_none() && find("vas").is_none());
    }

    #[test]
    fn entries_come_from_the_types() {
        let victim = find("vas.pick_victim").unwrap();
        assert_eq!(victim.entry(), "vas_pick_victim(i32) -> i32");
        assert!(victim.uses_arg_area);
        assert_eq!(victim.callable, ["vino_page_hint"]);
        assert_eq!(victim.budget, <PickVictim as vino_graft::GraftPoint>::BUDGET);
        let buddy = find("file.block_buddy").unwrap();
        assert_eq!(buddy.budget, vino_graft::DEFAULT_BUDGET);
        assert_eq!(buddy.entry(), "file_block_buddy(i64, i64, i64, i32, i32, i64) -> i64");
        assert!(!buddy.uses_arg_area);
        let unlink = find("event.fs.unlink").unwrap();
        assert_eq!(unlink.callable, ["vino_file_write", "vino_file_fsync"]);
        assert_eq!(unlink.export(), "event_fs_unlink");
    }

    #[test]
    fn the_abi_doc_holds_the_generated_table() {
        let path = doc_path();
        let doc = std::fs::read_to_string(&path).unwrap();
        let rendered = render_markdown();
        let section = generated_section(&doc)
            .unwrap_or_else(|| panic!("{} has no `{DOC_BEGIN}` ... `{DOC_END}` section", path.display()));
        if section == rendered {
            return;
        }
        if std::env::var_os("VINO_UPDATE_DOCS").is_some() {
            std::fs::write(&path, splice_markdown(&doc).unwrap()).unwrap();
            return;
        }
        panic!(
            "docs/graft-abi.md's graftpoint table differs from the registry (vino_kernel::graftpoints).\n\
             Regenerate it: VINO_UPDATE_DOCS=1 cargo test --release -p vino-kernel --lib graftpoints, \
             or paste the output of `vino graft points --markdown` between the markers.\n\
             --- in the doc:\n{section}\n--- from the registry:\n{rendered}"
        );
    }

    #[test]
    fn the_abi_doc_has_a_section_for_every_graftpoint_and_no_other() {
        let doc = std::fs::read_to_string(doc_path()).unwrap();
        let mut named = BTreeSet::new();
        for heading in doc.lines().filter(|l| l.starts_with("### ")) {
            for (i, part) in heading.split('`').enumerate() {
                if i % 2 == 1 {
                    assert!(
                        find(part).is_some_and(|g| g.name == part),
                        "docs/graft-abi.md: section `{heading}` names `{part}`, which is no graftpoint of the kernel"
                    );
                    named.insert(part.to_string());
                }
            }
        }
        for name in names() {
            assert!(
                named.contains(name),
                "docs/graft-abi.md has no `### `{name}`` section for graftpoint {name}"
            );
        }
    }
}
