//! Pipelines: programs whose standard output feeds the next one's standard input through
//! kernel pipes, as a shell's `a | b | c` (what `vino run` runs when its arguments hold `|`).
//! They run as one session: a holder process the caller spawned leads it (it runs nothing; it
//! is the stages' parent and pays for their pipes), so a signal to the session (Ctrl-C) reaches
//! every stage, a kill of the holder kills them all, and what any stage leaves running ends
//! with the pipeline.

use crate::fds::{Entry, PipeFd};
use crate::{Exit, KillSwitch, Program, RunError, Setup, Start, Stdio, Streams, preopen};
use std::sync::Arc;
use vino_kernel::Process;

/// One program of a pipeline and how it starts (its own arguments, environment, directories).
pub struct Stage {
    pub program: Program,
    pub setup: Setup,
}

/// Runs `stages` as one pipeline under `holder`, with the runner's streams at its ends (the
/// first stage's input, the last one's output, every stage's error), until every stage has
/// ended; their exits, in order. `kill` thrown kills every stage.
pub fn run_pipeline(
    holder: &Arc<Process>,
    stages: Vec<Stage>,
    stdio: Stdio,
    kill: &KillSwitch,
) -> Result<Vec<Exit>, RunError> {
    let kernel = holder.kernel().clone();
    let streams = Arc::new(Streams::from(stdio));
    let switches: Vec<KillSwitch> = stages.iter().map(|s| s.program.kill_switch()).collect();
    {
        let switches = switches.clone();
        let session = holder.pid();
        let k = kernel.clone();
        holder.set_killer(Arc::new(move || {
            switches.iter().for_each(KillSwitch::kill);
            k.end_session(session);
        }));
    }
    kill.bind(holder);
    if kill.killed() {
        holder.kill();
    }
    let n = stages.len();
    let mut starts = Vec::with_capacity(n);
    let mut verified = Vec::with_capacity(n);
    let mut feed: Option<vino_kernel::PipeEnd> = None;
    let refuse = |e: RunError, started: &[(Arc<Process>, Start)]| {
        for (p, _) in started {
            kernel.exit(p.pid());
            let _ = holder.wait_child(Some(p.pid()));
        }
        e
    };
    for (i, stage) in stages.iter().enumerate() {
        let child = match kernel.spawn_child(holder) {
            Ok(c) => c,
            Err(e) => return Err(refuse(RunError::Refused(e), &starts)),
        };
        // Every stage passes `exec.verify` before any starts.
        match stage.program.verify(&child, &crate::program_name(&stage.setup.args)) {
            Ok(v) => verified.push(v),
            Err(e) => {
                starts.push((child, empty_start(&streams)));
                return Err(refuse(e, &starts));
            }
        }
        let mut fds = match preopen(&child, &stage.setup) {
            Ok(fds) => fds,
            Err((e, mut opened)) => {
                for fd in opened.drain() {
                    let _ = child.close(fd);
                }
                starts.push((child, empty_start(&streams)));
                return Err(refuse(e, &starts));
            }
        };
        let pipe = |end: vino_kernel::PipeEnd| {
            Entry::Pipe(PipeFd {
                end: Arc::new(end),
                nonblock: false,
            })
        };
        if let Some(r) = feed.take() {
            let _ = fds.place(0, pipe(r));
        }
        if i + 1 < n {
            let (r, w) = match holder.pipe() {
                Ok(ends) => ends,
                Err(e) => {
                    starts.push((
                        child,
                        Start {
                            fds,
                            args: Vec::new(),
                            env: Vec::new(),
                            stdio: streams.clone(),
                        },
                    ));
                    return Err(refuse(RunError::Refused(e), &starts));
                }
            };
            let _ = fds.place(1, pipe(w));
            feed = Some(r);
        }
        let start = Start {
            fds,
            args: stage.setup.args.clone(),
            env: stage.setup.environment(),
            stdio: streams.clone(),
        };
        starts.push((child, start));
    }
    // A signal to the session is for the stages: the holder, which runs nothing, takes none
    // (were it to die of one, its killer would end the stages with SIGKILL instead). Set once
    // the stages exist, which would otherwise inherit it.
    for sig in 1..=vino_kernel::signal::SIGMAX {
        let _ = holder.signal_action(sig, vino_kernel::signal::Disposition::Ignore);
    }
    let exits = std::thread::scope(|s| {
        let runs: Vec<_> = starts
            .into_iter()
            .zip(verified)
            .zip(stages.iter().zip(&switches))
            .map(|(((child, start), verified), (stage, switch))| {
                let k = kernel.clone();
                s.spawn(move || {
                    let pid = child.pid();
                    let exit = stage.program.run_start(child, verified, start, switch);
                    let status = exit
                        .as_ref()
                        .map_or(vino_kernel::ExitStatus::Exited(127), Exit::exit_status);
                    k.exit_with(pid, status);
                    exit
                })
            })
            .collect();
        runs.into_iter()
            .map(|r| {
                r.join()
                    .unwrap_or_else(|_| Err(RunError::Invalid("a stage's runner panicked".into())))
            })
            .collect::<Vec<_>>()
    });
    // Reaped here (the holder runs no program to wait for them); what they left runs no more.
    while let Ok(vino_kernel::Waited::Child(..)) = holder.wait_child(None) {}
    kernel.end_session(holder.pid());
    exits.into_iter().collect()
}

/// A start with nothing, for a stage refused before it had one.
fn empty_start(streams: &Arc<Streams>) -> Start {
    Start {
        fds: crate::fds::FdTable::empty(),
        args: Vec::new(),
        env: Vec::new(),
        stdio: streams.clone(),
    }
}

/// The status of a pipeline as a shell with `pipefail` gives it: the last stage's that is not
/// 0, or 0.
pub fn pipefail_status(exits: &[Exit]) -> i32 {
    exits.iter().rev().map(Exit::status).find(|&s| s != 0).unwrap_or(0)
}
