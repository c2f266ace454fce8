//! Processes making processes, in the simulation: the workload's processes spawn children,
//! which end (with a code, or of a signal one of them was sent), are waited for, and talk
//! through pipes. Each answer is checked against a small model: who may signal whom, what
//! `wait` finds and in what order, what a pipe holds, when a write is refused (`EAGAIN`, whole
//! or not at all up to PIPE_BUF, `EPIPE`), and that every program slot and pipe buffer is
//! given back at the end (the simulator's final check that nothing stays charged).

use std::collections::VecDeque;
use std::sync::Arc;
use vino_blockdev::rng::SplitMix64;
use vino_kernel::signal::{self, DefaultAction};
use vino_kernel::{Errno, ExitStatus, PIPE_BUF, PIPE_CAPACITY, PipeEnd, Process, Waited};

/// Children alive or waited-for at once, and pipes open at once.
const KIDS_MAX: usize = 6;
const PIPES_MAX: usize = 3;
/// Signals the workload sends (one ignored by default, the rest ending their target).
const SIGNALS: [u8; 4] = [signal::SIGTERM, signal::SIGUSR1, signal::SIGCHLD, signal::SIGKILL];

/// A step of the family workload; process numbers are the simulation's, child and pipe
/// numbers index the lists here (taken modulo their length when applied).
#[derive(Debug, Clone)]
pub enum FamilyStep {
    Spawn(usize),
    /// A child ends with this code (or of the signal it was sent, if one ended it).
    Exit(usize, u8),
    Wait(usize),
    /// Process `from` signals a child.
    Signal(usize, usize, u8),
    Pipe(usize),
    Write(usize, usize, u64),
    Read(usize, usize),
    /// Closes a pipe's read end (`true`) or write end.
    Close(usize, bool),
}

struct Kid {
    p: Arc<Process>,
    parent: usize,
    /// The signal that ended it, as the model expects (its first terminating one).
    killed_by: Option<u8>,
    exited: bool,
}

struct SimPipe {
    r: Option<PipeEnd>,
    w: Option<PipeEnd>,
    queued: VecDeque<u8>,
}

/// The children and pipes of the workload, and what the model expects of them.
#[derive(Default)]
pub struct Family {
    kids: Vec<Kid>,
    /// Per simulated process: its children that ended, in the order they did.
    zombies: Vec<VecDeque<(u64, ExitStatus)>>,
    pipes: Vec<SimPipe>,
    pub spawned: u64,
    pub signalled: u64,
    pub piped_bytes: u64,
}

impl FamilyStep {
    pub fn random(rng: &mut SplitMix64, who: usize) -> FamilyStep {
        match rng.below(8) {
            0 => FamilyStep::Spawn(who),
            1 => FamilyStep::Exit(rng.below(64) as usize, rng.below(256) as u8),
            2 => FamilyStep::Wait(who),
            3 => FamilyStep::Signal(who, rng.below(64) as usize, SIGNALS[rng.below(4) as usize]),
            4 => FamilyStep::Pipe(who),
            5 => {
                let len = if rng.chance(0.5) {
                    1 + rng.below(PIPE_BUF as u64)
                } else {
                    rng.below(PIPE_CAPACITY as u64 + 8192)
                };
                FamilyStep::Write(rng.below(64) as usize, len as usize, rng.next_u64())
            }
            6 => FamilyStep::Read(rng.below(64) as usize, 1 + rng.below(PIPE_CAPACITY as u64) as usize),
            _ => FamilyStep::Close(rng.below(64) as usize, rng.chance(0.5)),
        }
    }
}

type Check<T = ()> = Result<T, String>;

impl Family {
    /// Applies `step` for the simulation's processes `procs`, checking the kernel's answers.
    pub fn apply(&mut self, procs: &[Arc<Process>], step: &FamilyStep) -> Check {
        self.zombies.resize_with(procs.len(), VecDeque::new);
        match *step {
            FamilyStep::Spawn(who) => self.spawn(procs, who),
            FamilyStep::Exit(k, code) => self.exit(k, code),
            FamilyStep::Wait(who) => self.wait(procs, who),
            FamilyStep::Signal(from, k, sig) => self.signal(procs, from, k, sig),
            FamilyStep::Pipe(who) => {
                if self.pipes.len() < PIPES_MAX {
                    let (r, w) = procs[who].pipe().map_err(|e| format!("pipe: {e}"))?;
                    self.pipes.push(SimPipe {
                        r: Some(r),
                        w: Some(w),
                        queued: VecDeque::new(),
                    });
                }
                Ok(())
            }
            FamilyStep::Write(n, len, seed) => self.write(n, len, seed),
            FamilyStep::Read(n, len) => self.read(n, len),
            FamilyStep::Close(n, read) => {
                if let Some(p) = self.pick_pipe(n) {
                    if read {
                        p.r.take()
                    } else {
                        p.w.take()
                    };
                    if p.r.is_none() && p.w.is_none() {
                        let i = n % self.pipes.len();
                        self.pipes.swap_remove(i);
                    }
                }
                Ok(())
            }
        }
    }

    fn spawn(&mut self, procs: &[Arc<Process>], who: usize) -> Check {
        if self.kids.len() >= KIDS_MAX {
            return Ok(());
        }
        let parent = &procs[who];
        let p = parent
            .kernel()
            .spawn_child(parent)
            .map_err(|e| format!("spawn by process {who}: {e}"))?;
        if p.ppid() != parent.pid() {
            return Err(format!(
                "child {} has parent {}, not {}",
                p.pid(),
                p.ppid(),
                parent.pid()
            ));
        }
        self.spawned += 1;
        self.kids.push(Kid {
            p,
            parent: who,
            killed_by: None,
            exited: false,
        });
        Ok(())
    }

    /// A live child ends as its runner would record it: of the signal that ended it, else
    /// with `code`.
    fn exit(&mut self, k: usize, code: u8) -> Check {
        let live: Vec<usize> = (0..self.kids.len()).filter(|&i| !self.kids[i].exited).collect();
        let Some(&i) = live.get(k % live.len().max(1)) else {
            return Ok(());
        };
        let kid = &mut self.kids[i];
        if kid.p.killed_by() != kid.killed_by {
            return Err(format!(
                "child {} died of {:?}, the model says {:?}",
                kid.p.pid(),
                kid.p.killed_by(),
                kid.killed_by
            ));
        }
        let status = kid.killed_by.map_or(ExitStatus::Exited(code), ExitStatus::Signaled);
        kid.p.kernel().exit_with(kid.p.pid(), status);
        kid.exited = true;
        self.zombies[kid.parent].push_back((kid.p.pid(), status));
        Ok(())
    }

    fn wait(&mut self, procs: &[Arc<Process>], who: usize) -> Check {
        let got = procs[who].wait_child(None).map_err(|e| e.errno);
        let want = match self.zombies[who].front() {
            Some(&(pid, st)) => Ok(Waited::Child(pid, st)),
            None if self.kids.iter().any(|k| k.parent == who && !k.exited) => Ok(Waited::Running),
            None => Err(Errno::Child),
        };
        if got != want {
            return Err(format!(
                "wait by process {who}: the kernel found {got:?}, the model {want:?}"
            ));
        }
        if let Ok(Waited::Child(pid, _)) = got {
            self.zombies[who].pop_front();
            self.kids.retain(|k| k.p.pid() != pid);
        }
        Ok(())
    }

    fn signal(&mut self, procs: &[Arc<Process>], from: usize, k: usize, sig: u8) -> Check {
        let n = self.kids.len().max(1);
        let Some(kid) = self.kids.get_mut(k % n) else {
            return Ok(());
        };
        let sender = procs[from].credentials();
        let got = procs[from]
            .kernel()
            .signal(sender, kid.p.pid(), sig)
            .map_err(|e| e.errno);
        let want = if kid.exited {
            Err(Errno::Srch)
        } else if sender.uid != kid.p.credentials().uid && !sender.privileged {
            Err(Errno::Perm)
        } else {
            Ok(())
        };
        if got != want {
            return Err(format!(
                "signal {sig} from process {from} to child {}: the kernel said {got:?}, the model {want:?}",
                kid.p.pid()
            ));
        }
        if got.is_ok() {
            self.signalled += 1;
            if kid.killed_by.is_none() && signal::default_action(sig) == DefaultAction::Terminate {
                kid.killed_by = Some(sig);
            }
        }
        Ok(())
    }

    fn pick_pipe(&mut self, n: usize) -> Option<&mut SimPipe> {
        let len = self.pipes.len();
        self.pipes.get_mut(n % len.max(1))
    }

    fn write(&mut self, n: usize, len: usize, seed: u64) -> Check {
        let Some(p) = self.pick_pipe(n) else { return Ok(()) };
        let Some(w) = &p.w else { return Ok(()) };
        let data = vino_fs::model::data(seed, len);
        let free = PIPE_CAPACITY - p.queued.len();
        let want = if p.r.is_none() {
            Err(Errno::Pipe)
        } else if len <= PIPE_BUF {
            if free >= len && len > 0 {
                Ok(len)
            } else {
                Err(Errno::Again)
            }
        } else if free == 0 {
            Err(Errno::Again)
        } else {
            Ok(free.min(len))
        };
        let got = w.write(&data).map_err(|e| e.errno);
        if got != want {
            return Err(format!(
                "write of {len} to a pipe: the kernel said {got:?}, the model {want:?}"
            ));
        }
        if let Ok(done) = got {
            p.queued.extend(&data[..done]);
        }
        Ok(())
    }

    fn read(&mut self, n: usize, len: usize) -> Check {
        let Some(p) = self.pick_pipe(n) else { return Ok(()) };
        let Some(r) = &p.r else { return Ok(()) };
        let mut buf = vec![0u8; len];
        let got = r.read(&mut buf).map_err(|e| e.errno);
        let want = if p.queued.is_empty() {
            if p.w.is_none() { Ok(0) } else { Err(Errno::Again) }
        } else {
            Ok(len.min(p.queued.len()))
        };
        if got != want {
            return Err(format!(
                "read of {len} from a pipe: the kernel said {got:?}, the model {want:?}"
            ));
        }
        if let Ok(done) = got {
            let expected: Vec<u8> = p.queued.drain(..done).collect();
            if buf[..done] != expected[..] {
                return Err(format!("a pipe gave back {done} bytes other than were written"));
            }
            self.piped_bytes += done as u64;
        }
        Ok(())
    }

    /// The end of the workload: pipes closed, every child ended and waited for.
    pub fn finish(&mut self, procs: &[Arc<Process>]) -> Check {
        self.zombies.resize_with(procs.len(), VecDeque::new);
        self.pipes.clear();
        while self.kids.iter().any(|k| !k.exited) {
            self.exit(0, 0)?;
        }
        for who in 0..procs.len() {
            while !self.zombies[who].is_empty() {
                self.wait(procs, who)?;
            }
        }
        if !self.kids.is_empty() {
            return Err(format!("{} children not reaped", self.kids.len()));
        }
        Ok(())
    }
}
