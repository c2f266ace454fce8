//! `vino-bench-net` (`vino bench net`): the network, in one run.
//!
//! - **stack**: VINO's TCP/IP stack against Linux's over a TUN link, beside the raw packet pump
//!   through the same link and Linux to Linux over a veth pair; with 1% loss; and a victim
//!   user's round trips while another user's port is flooded (experiments/src/net.rs).
//! - **congestion**: Reno and CUBIC as `net.congestion` grafts against the built-ins at 1% loss,
//!   and a call's cost (experiments/src/congestion.rs).
//! - **serve**: a server in the kernel against the same server as a VINO process and nginx
//!   (experiments/src/serve.rs).
//! - **pick**: users sharing a rated way out, and `net.pick_packet` ordering it
//!   (experiments/src/pick.rs).
//!
//! Writes `net.json` (every part) and `net.svg`, and each part's own `congestion`, `serve` and
//! `pick` JSON and SVG beside them. The stack and serve parts need root (network namespaces, a
//! TUN device, a veth pair).

use clap::{Parser, ValueEnum};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use vino_experiments::front::{self, Common};
use vino_experiments::{congestion, net, pick, serve};
use vino_measure::report::{Table, write_json};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Part {
    Stack,
    Congestion,
    Serve,
    Pick,
}

/// The network's benchmarks in one run (experiments/src/net.rs and the parts beside it).
#[derive(Parser)]
#[command(name = "vino-bench-net")]
struct Args {
    #[command(flatten)]
    common: Common,
    /// Only these parts (default: all). Without the stack part, `net.json` is left as it is and
    /// only the parts' own files are written.
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Part>,
    /// Rounds of the stack part (default 3; 1 with --quick).
    #[arg(long)]
    rounds: Option<usize>,
    /// Seconds each bulk transfer of the stack part sends (default 2; 0.4 with --quick).
    #[arg(long)]
    seconds: Option<f64>,
    /// Where the serve part's built programs go.
    #[arg(long, default_value = "target/vino-bench")]
    scratch: PathBuf,
}

/// Every part's report; the stack's fields at the top, as `net.json` always had them.
#[derive(Serialize)]
struct NetAll {
    #[serde(flatten)]
    stack: Option<net::NetReport>,
    congestion: Option<congestion::CongestionReport>,
    serve: Option<serve::ServeReport>,
    pick: Option<pick::PickReport>,
}

impl NetAll {
    fn tables(&self) -> Vec<Table> {
        let mut all = Vec::new();
        all.extend(self.stack.iter().flat_map(net::NetReport::tables));
        all.extend(self.congestion.iter().flat_map(congestion::CongestionReport::tables));
        all.extend(self.serve.iter().flat_map(serve::ServeReport::tables));
        all.extend(self.pick.iter().flat_map(pick::PickReport::tables));
        all
    }

    /// Each part's own JSON and SVG in `out`, so its page shows this run.
    fn write_parts(&self, out: &Path) -> anyhow::Result<()> {
        let file = |name: &str, ext: &str| out.join(format!("{name}.{ext}"));
        if let Some(c) = &self.congestion {
            write_json(&file("congestion", "json"), c)?;
            c.plot(&file("congestion", "svg"))?;
        }
        if let Some(s) = &self.serve {
            write_json(&file("serve", "json"), s)?;
            s.plot(&file("serve", "svg"))?;
        }
        if let Some(k) = &self.pick {
            write_json(&file("pick", "json"), k)?;
            k.plot(&file("pick", "svg"))?;
        }
        Ok(())
    }
}

fn main() -> ExitCode {
    let Args {
        common,
        only,
        rounds,
        seconds,
        scratch,
    } = Args::parse();
    let part = |p: Part| only.is_empty() || only.contains(&p);
    let quick = common.quick;
    let stack_defaults = net::NetOptions::new(quick);
    let stack_opts = net::NetOptions {
        rounds: rounds.unwrap_or(stack_defaults.rounds).max(1),
        seconds: seconds.unwrap_or(stack_defaults.seconds),
        ..stack_defaults
    };
    let serve_opts = serve::ServeOptions {
        scratch,
        ..serve::ServeOptions::new(quick)
    };
    let out = common.out.clone();
    let files = !common.no_files;
    let common = Common {
        no_files: common.no_files || !part(Part::Stack),
        ..common
    };
    let result = front::experiment(
        &common,
        "net",
        |p| {
            let all = NetAll {
                stack: part(Part::Stack).then(|| net::run(&stack_opts, p)).transpose()?,
                congestion: part(Part::Congestion)
                    .then(|| congestion::run(&congestion::CongestionOptions::new(quick), p))
                    .transpose()?,
                serve: part(Part::Serve).then(|| serve::run(&serve_opts, p)).transpose()?,
                pick: part(Part::Pick)
                    .then(|| pick::run(&pick::PickOptions::new(quick), p))
                    .transpose()?,
            };
            if files {
                all.write_parts(&out)?;
            }
            Ok(all)
        },
        NetAll::tables,
        |r, path| r.stack.as_ref().map_or(Ok(()), |s| s.plot(path)),
    );
    front::exit("vino-bench-net", result)
}
