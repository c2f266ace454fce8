//! The result pages (`docs/results/<name>.md`): each holds, between two markers, tables drawn
//! from `results/<name>.json`, so a page's numbers are the file's. [`sync`] rewrites (or, to
//! check, compares) the region of every page; `vino-bench-report` runs it and a test keeps the
//! pages so.
//!
//! The experiments' JSON shapes differ, so each page names its tables as paths into its file:
//! `a.b[]` is every element of the array `a.b`, `a[].c[]` every element of each `c` inside
//! every `a`. A column's path is read from the row; each leading `^` climbs one array up, so
//! `^name` in a row of `phases[].victim.ops[]` is the phase's name.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::report::{fmt_count, fmt_ns, fmt_ratio};

/// How a value is shown.
#[derive(Clone, Copy, Debug)]
pub enum Fmt {
    /// As it is (strings unquoted, `true`/`false` as yes/no).
    Text,
    /// Nanoseconds, with a readable unit.
    Ns,
    /// Microseconds, with a readable unit.
    Us,
    /// Milliseconds, with a readable unit.
    Ms,
    /// Seconds, with a readable unit.
    Secs,
    /// A ratio, about three significant digits.
    Ratio,
    /// A ratio as a factor ("1.5x").
    Times,
    /// A fraction shown as a percentage.
    Percent,
    /// A count with thousands separators.
    Count,
    /// Bytes shown in MiB.
    Mib,
}

/// One column: its heading, the path of its value in a row, its format.
pub type Column = (&'static str, &'static str, Fmt);

/// One table of a page.
pub struct Table {
    /// The line above the table.
    pub title: &'static str,
    /// The rows: a path ending in `[]`, or `""` for one row of the file's top-level fields.
    pub rows: &'static str,
    /// A pivot: one row per value of the first column, one column per value at this path, each
    /// cell the other columns' values (the first, then the rest in parentheses).
    pub across: Option<&'static str>,
    pub columns: &'static [Column],
}

/// One page: the experiment's name (`results/<name>.json`, `docs/results/<name>.md`), its tables.
pub struct Page {
    pub name: &'static str,
    pub tables: &'static [Table],
}

/// The line that opens a page's generated region.
pub fn begin_marker(name: &str) -> String {
    format!("<!-- generated from results/{name}.json by vino-bench-report: do not edit -->")
}

/// The line that closes it.
pub const END_MARKER: &str = "<!-- end generated -->";

/// The command that rewrites every page's region.
pub const FIX_COMMAND: &str = "cargo run --release -p vino-measure --bin vino-bench-report";

/// A value's display in format `fmt`; a missing or null value is a dash.
fn show(value: Option<&Value>, fmt: Fmt) -> String {
    let Some(value) = value.filter(|v| !v.is_null()) else {
        return "–".into();
    };
    let number = value.as_f64();
    match (fmt, number) {
        (Fmt::Ns, Some(n)) => fmt_ns(n),
        (Fmt::Us, Some(n)) => fmt_ns(n * 1e3),
        (Fmt::Ms, Some(n)) => fmt_ns(n * 1e6),
        (Fmt::Secs, Some(n)) => fmt_ns(n * 1e9),
        (Fmt::Ratio, Some(n)) => fmt_ratio(n),
        (Fmt::Times, Some(n)) => format!("{}x", fmt_ratio(n)),
        (Fmt::Percent, Some(n)) => format!("{}%", fmt_ratio(n * 100.0)),
        (Fmt::Count, Some(n)) if n.fract() == 0.0 && n.abs() < 100.0 => format!("{n:.0}"),
        (Fmt::Count, Some(n)) => fmt_count(n),
        (Fmt::Mib, Some(n)) => format!("{} MiB", fmt_ratio(n / (1024.0 * 1024.0))),
        _ => text(value),
    }
}

/// A value as text, as it reads in a table cell (pipes escaped).
fn text(value: &Value) -> String {
    let s = match value {
        Value::String(s) => s.clone(),
        Value::Bool(b) => if *b { "yes" } else { "no" }.into(),
        Value::Array(items) if items.is_empty() => "none".into(),
        Value::Array(items) => items.iter().map(text).collect::<Vec<_>>().join(", "),
        // An enum with data, as serde writes it: `{"graft": 8}` reads "graft 8".
        Value::Object(fields) => fields
            .iter()
            .map(|(k, v)| format!("{} {}", k.replace('_', " "), text(v)))
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    };
    s.replace('|', "\\|").replace('\n', " ")
}

/// The value at a dot path inside `value`.
fn get<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .filter(|p| !p.is_empty())
        .try_fold(value, |v, key| v.get(key))
}

/// Every row a rows path names, each with the elements of the arrays above it (innermost last).
fn rows<'a>(root: &'a Value, path: &str) -> Result<Vec<Vec<&'a Value>>> {
    let mut found = vec![vec![root]];
    for step in path.split("[]").filter(|s| !s.is_empty()) {
        let key = step.trim_start_matches('.');
        let mut next = Vec::new();
        for chain in &found {
            let parent = chain.last().expect("a chain holds its root");
            let Some(Value::Array(items)) = get(parent, key) else {
                bail!("no array at `{key}` of `{path}`")
            };
            for item in items {
                let mut longer = chain.clone();
                longer.push(item);
                next.push(longer);
            }
        }
        found = next;
    }
    Ok(found)
}

/// A column's value in a row: each leading `^` reads from one array further up.
fn cell<'a>(chain: &[&'a Value], path: &str) -> Option<&'a Value> {
    let up = path.chars().take_while(|c| *c == '^').count();
    let at = chain.len().checked_sub(1 + up)?;
    get(chain[at], &path[up..])
}

/// One table as Markdown.
fn render_table(root: &Value, table: &Table) -> Result<String> {
    let chains = rows(root, table.rows)?;
    let (headings, body) = match table.across {
        None => (
            table.columns.iter().map(|c| c.0.to_string()).collect(),
            plain_rows(&chains, table.columns),
        ),
        Some(across) => pivot_rows(&chains, table.columns, across),
    };
    // A table without a title continues the one above it.
    let mut out = if table.title.is_empty() {
        String::new()
    } else {
        format!("{}\n\n", table.title)
    };
    out += &format!("| {} |\n", headings.join(" | "));
    out += &format!("|{}\n", " --- |".repeat(headings.len()));
    for cells in body {
        out += &format!("| {} |\n", cells.join(" | "));
    }
    Ok(out)
}

/// One row per row found, one cell per column; a row with nothing past its first cell is left out.
fn plain_rows(chains: &[Vec<&Value>], columns: &[Column]) -> Vec<Vec<String>> {
    let rows = chains.iter().map(|chain| {
        columns
            .iter()
            .map(|(_, path, fmt)| show(cell(chain, path), *fmt))
            .collect::<Vec<_>>()
    });
    rows.filter(|cells| columns.len() < 2 || cells[1..].iter().any(|c| !c.is_empty() && c != "–"))
        .collect()
}

/// The headings and rows of a pivot, in the order the keys first appear.
fn pivot_rows(chains: &[Vec<&Value>], columns: &[Column], across: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let (key, parts) = columns.split_first().expect("a pivot has a key column");
    let key_of = |chain: &Vec<&Value>| show(cell(chain, key.1), key.2);
    let across_of = |chain: &Vec<&Value>| show(cell(chain, across), Fmt::Text);
    let mut keys: Vec<String> = Vec::new();
    let mut tops: Vec<String> = Vec::new();
    for chain in chains {
        for (list, value) in [(&mut keys, key_of(chain)), (&mut tops, across_of(chain))] {
            if !list.contains(&value) {
                list.push(value);
            }
        }
    }
    let body = keys
        .iter()
        .map(|k| {
            let mut row = vec![k.clone()];
            for top in &tops {
                let found = chains.iter().find(|c| &key_of(c) == k && &across_of(c) == top);
                row.push(found.map_or("–".into(), |chain| pivot_cell(chain, parts)));
            }
            row
        })
        .collect();
    (std::iter::once(key.0.to_string()).chain(tops).collect(), body)
}

/// A pivot's cell: the first part, the others in parentheses.
fn pivot_cell(chain: &[&Value], parts: &[Column]) -> String {
    let shown: Vec<String> = parts
        .iter()
        .map(|(_, path, fmt)| show(cell(chain, path), *fmt))
        .collect();
    match shown.split_first() {
        Some((first, rest)) if !rest.is_empty() => format!("{first} ({})", rest.join(", ")),
        Some((first, _)) => first.clone(),
        None => String::new(),
    }
}

/// The generated region of a page (markers excluded): its tables, then the file's notes.
pub fn render(page: &Page, root: &Value) -> Result<String> {
    let mut parts = Vec::new();
    for table in page.tables {
        parts.push(render_table(root, table).with_context(|| format!("results/{}.json", page.name))?);
    }
    if let Some(Value::Array(notes)) = root
        .get("notes")
        .filter(|n| n.as_array().is_some_and(|a| !a.is_empty()))
    {
        let lines: Vec<String> = notes.iter().map(|n| format!("- {}", text(n))).collect();
        parts.push(format!("Notes the run recorded:\n\n{}\n", lines.join("\n")));
    }
    Ok(parts.join("\n"))
}

/// A page's text with its region replaced by `region`.
pub fn splice(page_text: &str, name: &str, region: &str) -> Result<String> {
    let begin = begin_marker(name);
    let Some(start) = page_text.find(&begin) else {
        bail!("no line `{begin}`")
    };
    let after = start + begin.len();
    let Some(len) = page_text[after..].find(END_MARKER) else {
        bail!("no `{END_MARKER}` after `{begin}`")
    };
    Ok(format!(
        "{}\n\n{}\n{}",
        &page_text[..after],
        region,
        &page_text[after + len..]
    ))
}

/// Rewrites (or with `check`, only compares) the generated region of every page under
/// `root` (the workspace); returns the pages that were (or would be) changed.
pub fn sync(root: &Path, check: bool) -> Result<Vec<PathBuf>> {
    let mut stale = Vec::new();
    for page in PAGES {
        let json_path = root.join(format!("results/{}.json", page.name));
        let md_path = root.join(format!("docs/results/{}.md", page.name));
        let json: Value = serde_json::from_str(
            &fs::read_to_string(&json_path).with_context(|| format!("reading {}", json_path.display()))?,
        )
        .with_context(|| format!("parsing {}", json_path.display()))?;
        let old = fs::read_to_string(&md_path).with_context(|| format!("reading {}", md_path.display()))?;
        let new = splice(&old, page.name, &render(page, &json)?).with_context(|| md_path.display().to_string())?;
        if new != old {
            if !check {
                fs::write(&md_path, &new).with_context(|| format!("writing {}", md_path.display()))?;
            }
            stale.push(md_path);
        }
    }
    Ok(stale)
}

const STATS: &[Column] = &[
    ("median", "stats.median_ns", Fmt::Ns),
    ("min", "stats.min_ns", Fmt::Ns),
    ("p90", "stats.p90_ns", Fmt::Ns),
];

/// A row of `vino bench vm`'s fault costs, either side.
const VM_FAULT_COLUMNS: &[Column] = &[
    ("measure", "measure", Fmt::Text),
    ("pages", "pages", Fmt::Count),
    ("per page", "ns_per_page", Fmt::Ns),
    ("/ floor", "vs_uffd_floor", Fmt::Ratio),
    ("/ one-CPU", "vs_uffd_one_cpu", Fmt::Ratio),
    ("major faults", "major_faults", Fmt::Count),
    ("minor faults", "minor_faults", Fmt::Count),
];

/// Every page and its tables.
pub const PAGES: &[Page] = &[
    Page {
        name: "core",
        tables: &[
            Table {
                title: "Core costs (E1), median of the rounds, per operation; `seed` is the thesis' figure:",
                rows: "costs.ops[]",
                across: None,
                columns: &[
                    ("group", "group", Fmt::Text),
                    ("operation", "name", Fmt::Text),
                    STATS[0],
                    STATS[1],
                    STATS[2],
                    ("seed (µs)", "seed_us", Fmt::Text),
                ],
            },
            Table {
                title: "Goals:",
                rows: "costs.goals[]",
                across: None,
                columns: &[
                    ("what", "what", Fmt::Text),
                    ("goal", "target_ns", Fmt::Ns),
                    ("measured", "measured_ns", Fmt::Ns),
                    ("met", "met", Fmt::Text),
                ],
            },
            Table {
                title: "Extension technologies (E2), per call, normalized to native:",
                rows: "extensions.results[]",
                across: None,
                columns: &[
                    ("workload", "workload", Fmt::Text),
                    ("technology", "variant", Fmt::Text),
                    ("median", "stats.median_ns", Fmt::Ns),
                    ("per block", "per_block_ns", Fmt::Ns),
                    ("vs native", "normalized", Fmt::Ratio),
                ],
            },
            Table {
                title: "The thesis' figures for the same workloads (normalized):",
                rows: "extensions.seed[]",
                across: None,
                columns: &[
                    ("workload", "workload", Fmt::Text),
                    ("technology", "technology", Fmt::Text),
                    ("normalized", "normalized", Fmt::Ratio),
                    ("source", "source", Fmt::Text),
                ],
            },
            Table {
                title: "Invocation costs:",
                rows: "extensions.invocation[]",
                across: None,
                columns: &[("call", "name", Fmt::Text), STATS[0], STATS[1], STATS[2]],
            },
            Table {
                title: "Loading a module (E3):",
                rows: "extensions.load[]",
                across: None,
                columns: &[
                    ("technology", "technology", Fmt::Text),
                    ("module", "module", Fmt::Text),
                    ("bytes", "module_bytes", Fmt::Count),
                    ("compile", "compile.median_ns", Fmt::Ns),
                    ("instantiate", "instantiate.median_ns", Fmt::Ns),
                ],
            },
            Table {
                title: "Break-even against a page fault (hot list):",
                rows: "extensions.break_even.hotlist[]",
                across: None,
                columns: &[
                    ("technology", "variant", Fmt::Text),
                    ("search", "search_ns", Fmt::Ns),
                    ("searches per fault", "searches_per_fault", Fmt::Count),
                    ("pays off", "pays_off", Fmt::Text),
                ],
            },
        ],
    },
    Page {
        name: "daemon",
        tables: &[
            Table {
                title: "Cost per operation by path:",
                rows: "rows[]",
                across: None,
                columns: &[
                    ("operation", "operation", Fmt::Text),
                    ("path", "path", Fmt::Text),
                    ("per operation", "ns_per_op", Fmt::Ns),
                ],
            },
            Table {
                title: "Tails through the socket:",
                rows: "tails[]",
                across: None,
                columns: &[
                    ("operation", "operation", Fmt::Text),
                    ("calls", "calls", Fmt::Count),
                    ("p50", "p50_ns", Fmt::Ns),
                    ("p99", "p99_ns", Fmt::Ns),
                    ("max", "max_ns", Fmt::Ns),
                ],
            },
        ],
    },
    Page {
        name: "events",
        tables: &[
            Table {
                title: "Checking an event against a filter, by files in the filter (median):",
                rows: "filter[]",
                across: None,
                columns: &[
                    ("files", "files", Fmt::Count),
                    ("per event", "cost.median_ns", Fmt::Ns),
                    ("p90", "cost.p90_ns", Fmt::Ns),
                ],
            },
            Table {
                title: "Polling instead (median):",
                rows: "poll[]",
                across: None,
                columns: &[
                    ("files", "files", Fmt::Count),
                    ("per poll", "cost.median_ns", Fmt::Ns),
                    ("p90", "cost.p90_ns", Fmt::Ns),
                ],
            },
            Table {
                title: "Break-even against polling, the filter alone:",
                rows: "break_even[]",
                across: None,
                columns: &[
                    ("files", "files", Fmt::Count),
                    ("event", "event_ns", Fmt::Ns),
                    ("poll", "poll_ns", Fmt::Ns),
                    ("ratio", "ratio", Fmt::Ratio),
                    ("s between polls", "seconds_between_polls", Fmt::Ratio),
                ],
            },
            Table {
                title: "With an asynchronous event graft:",
                rows: "break_even_async[]",
                across: None,
                columns: &[
                    ("files", "files", Fmt::Count),
                    ("event", "event_ns", Fmt::Ns),
                    ("poll", "poll_ns", Fmt::Ns),
                    ("ratio", "ratio", Fmt::Ratio),
                    ("s between polls", "seconds_between_polls", Fmt::Ratio),
                ],
            },
            Table {
                title: "With a synchronous event graft:",
                rows: "break_even_sync[]",
                across: None,
                columns: &[
                    ("files", "files", Fmt::Count),
                    ("event", "event_ns", Fmt::Ns),
                    ("poll", "poll_ns", Fmt::Ns),
                    ("ratio", "ratio", Fmt::Ratio),
                    ("s between polls", "seconds_between_polls", Fmt::Ratio),
                ],
            },
            Table {
                title: "An event graft, asynchronous and synchronous delivery (median):",
                rows: "",
                across: None,
                columns: &[
                    ("async unprotected", "async_graft.unprotected.median_ns", Fmt::Ns),
                    ("async protected", "async_graft.protected.median_ns", Fmt::Ns),
                    (
                        "async end to end",
                        "async_graft.protected_end_to_end.median_ns",
                        Fmt::Ns,
                    ),
                    ("sync unprotected", "sync_graft.unprotected.median_ns", Fmt::Ns),
                    ("sync protected", "sync_graft.protected.median_ns", Fmt::Ns),
                    ("sync end to end", "sync_graft.protected_end_to_end.median_ns", Fmt::Ns),
                ],
            },
        ],
    },
    Page {
        name: "gunzip",
        tables: &[
            Table {
                title: "gunzip through the kernel, by device and read-ahead policy (median of the runs):",
                rows: "cells[]",
                across: None,
                columns: &[
                    ("device", "device", Fmt::Text),
                    ("policy", "policy", Fmt::Text),
                    ("runs", "runs", Fmt::Count),
                    ("elapsed", "elapsed_s", Fmt::Secs),
                    ("user", "user_s", Fmt::Secs),
                    ("kernel", "kernel_s", Fmt::Secs),
                    ("CPU use", "cpu_util", Fmt::Percent),
                    ("misses", "misses", Fmt::Count),
                    ("prefetched", "prefetched", Fmt::Count),
                    ("used", "prefetch_used", Fmt::Count),
                    ("vs off", "vs_off", Fmt::Ratio),
                ],
            },
            Table {
                title: "The graft's protection against the same policy compiled in:",
                rows: "protection[]",
                across: None,
                columns: &[
                    ("device", "device", Fmt::Text),
                    ("blocks", "blocks", Fmt::Count),
                    ("graft", "graft_elapsed_s", Fmt::Secs),
                    ("native", "native_elapsed_s", Fmt::Secs),
                    ("overhead", "overhead", Fmt::Percent),
                    ("same decisions", "same_decisions", Fmt::Text),
                ],
            },
            Table {
                title: "gunzip as a VINO process (median of the runs):",
                rows: "program_cells[]",
                across: None,
                columns: &[
                    ("device", "device", Fmt::Text),
                    ("policy", "policy", Fmt::Text),
                    ("runs", "runs", Fmt::Count),
                    ("elapsed", "elapsed_s", Fmt::Secs),
                    ("misses", "misses", Fmt::Count),
                    ("prefetched", "prefetched", Fmt::Count),
                    ("used", "prefetch_used", Fmt::Count),
                    ("vs off", "vs_off", Fmt::Ratio),
                ],
            },
        ],
    },
    Page {
        name: "isolation",
        tables: &[
            Table {
                title: "The victim's p99 in each phase (the attacker's phase names its attack; against the one-core baseline):",
                rows: "rows[]",
                across: Some("op"),
                columns: &[
                    ("phase", "phase", Fmt::Text),
                    ("p99", "p99_ns", Fmt::Ns),
                    ("vs one core", "one_core_ratio", Fmt::Times),
                ],
            },
            Table {
                title: "What each attack did:",
                rows: "phases[]",
                across: None,
                columns: &[
                    ("phase", "name", Fmt::Text),
                    ("attack", "note", Fmt::Text),
                    ("outcome", "summary", Fmt::Text),
                ],
            },
            Table {
                title: "CPU in each phase (cores):",
                rows: "phases[]",
                across: None,
                columns: &[
                    ("phase", "name", Fmt::Text),
                    ("victim client", "cpu.victim_client", Fmt::Ratio),
                    ("victim daemon", "cpu.victim_daemon", Fmt::Ratio),
                    ("attacker client", "cpu.attacker_client", Fmt::Ratio),
                    ("attacker daemon", "cpu.attacker_daemon", Fmt::Ratio),
                    ("peak RSS (MiB)", "peak_rss_mib", Fmt::Ratio),
                ],
            },
        ],
    },
    Page {
        name: "layout",
        tables: &[
            Table {
                title: "Writing and reading back small files, by device, file size and layout (median of the runs):",
                rows: "cells[]",
                across: None,
                columns: &[
                    ("device", "device", Fmt::Text),
                    ("file size", "file_bytes", Fmt::Count),
                    ("layout", "layout", Fmt::Text),
                    ("runs", "runs", Fmt::Count),
                    ("write MB/s", "write_mb_s", Fmt::Ratio),
                    ("read MB/s", "read_mb_s", Fmt::Ratio),
                    ("install", "install_s", Fmt::Secs),
                    ("write vs default", "write_norm", Fmt::Ratio),
                    ("read vs default", "read_norm", Fmt::Ratio),
                    ("read seeks", "read_seeks", Fmt::Count),
                ],
            },
            Table {
                title: "Loading the placement graft:",
                rows: "",
                across: None,
                columns: &[
                    ("module bytes", "load.wasm_bytes", Fmt::Count),
                    ("cold compile", "load.cold_compile_ns", Fmt::Ns),
                    ("first load", "load.first_load_ns", Fmt::Ns),
                    ("cached load", "load.cached_load_ns", Fmt::Ns),
                    ("install per file", "load.install_per_file_ns", Fmt::Ns),
                ],
            },
        ],
    },
    Page {
        name: "linux",
        tables: &[
            Table {
                title: "The Wisconsin selection on ext4 through Linux's page cache, by mode:",
                rows: "runs[]",
                across: None,
                columns: &[
                    ("mode", "mode", Fmt::Text),
                    ("records", "records", Fmt::Count),
                    ("missed pages", "miss_pages", Fmt::Count),
                    ("time", "time_ns", Fmt::Ns),
                    ("min", "time_min_ns", Fmt::Ns),
                    ("max", "time_max_ns", Fmt::Ns),
                    ("device reads", "device_reads", Fmt::Count),
                    ("limit hits", "limit_hits", Fmt::Count),
                ],
            },
            Table {
                title: "The same selection on VINO in the same run:",
                rows: "vino.devices[].runs[]",
                across: None,
                columns: &[
                    ("device", "^kind", Fmt::Text),
                    ("policy", "policy", Fmt::Text),
                    ("protection", "protection", Fmt::Text),
                    ("records or blocks", "param", Fmt::Count),
                    ("look-ahead beside", "lookahead", Fmt::Count),
                    ("order", "order", Fmt::Text),
                    ("misses", "cache.misses", Fmt::Count),
                    ("time", "time_ns", Fmt::Ns),
                    ("device reads", "device_reads", Fmt::Count),
                ],
            },
        ],
    },
    Page {
        name: "locks",
        tables: &[Table {
            title: "Readers and writers of one file under each grant policy, by device and share of writes:",
            rows: "cells[]",
            across: None,
            columns: &[
                ("device", "device", Fmt::Text),
                ("policy", "policy", Fmt::Text),
                ("writes %", "write_percent", Fmt::Count),
                ("read", "read_ms", Fmt::Ms),
                ("read wait", "read_wait_ms", Fmt::Ms),
                ("write", "write_ms", Fmt::Ms),
                ("write wait", "write_wait_ms", Fmt::Ms),
                ("longest write wait", "write_wait_max_ms", Fmt::Ms),
                ("ops/s", "throughput", Fmt::Ratio),
                ("graft time", "policy_ns", Fmt::Ns),
            ],
        }],
    },
    Page {
        name: "miss",
        tables: &[Table {
            title: "A 4 KiB miss, layer by layer:",
            rows: "layers[]",
            across: None,
            columns: &[
                ("layer", "layer", Fmt::Text),
                ("median", "median_us", Fmt::Us),
                ("p99", "p99_us", Fmt::Us),
                ("vs pread", "vs_raw", Fmt::Ratio),
            ],
        }],
    },
    Page {
        name: "native",
        tables: &[
            Table {
                title: "Real programs: a VINO process, the same .wasm on stock wasmtime and Node, the same C native \
                        (median of the rounds):",
                rows: "steps[]",
                across: None,
                columns: &[
                    ("step", "step", Fmt::Text),
                    ("kind", "kind", Fmt::Text),
                    ("VINO", "vino_s", Fmt::Secs),
                    ("wasmtime", "wasmtime_s", Fmt::Secs),
                    ("native", "native_s", Fmt::Secs),
                    ("Node", "node_s", Fmt::Secs),
                    ("VINO / wasmtime", "vino_vs_wasmtime", Fmt::Ratio),
                    ("VINO / native", "vino_vs_native", Fmt::Ratio),
                    ("wasmtime / native", "wasmtime_vs_native", Fmt::Ratio),
                    ("Node / native", "node_vs_native", Fmt::Ratio),
                    ("goal 1.1x of wasmtime met", "meets_wasmtime_goal", Fmt::Text),
                ],
            },
            Table {
                title: "What wasmtime's settings change for the same module (stock wasmtime):",
                rows: "settings[]",
                across: None,
                columns: &[
                    ("setting", "setting", Fmt::Text),
                    ("time", "seconds", Fmt::Secs),
                    ("vs VINO's Config", "vs_vino_config", Fmt::Ratio),
                ],
            },
        ],
    },
    Page {
        name: "programs",
        tables: &[
            Table {
                title: "Unmodified programs on the mount against ext4:",
                rows: "steps[]",
                across: None,
                columns: &[
                    ("step", "step", Fmt::Text),
                    ("VINO", "vino_s", Fmt::Secs),
                    ("ext4", "ext4_s", Fmt::Secs),
                    ("VINO / ext4", "ratio", Fmt::Ratio),
                ],
            },
            Table {
                title: "By transport, with the requests served and the daemon's time on them:",
                rows: "steps[].by_transport[]",
                across: None,
                columns: &[
                    ("step", "^step", Fmt::Text),
                    ("transport", "transport", Fmt::Text),
                    ("time", "seconds", Fmt::Secs),
                    ("requests", "served.requests", Fmt::Count),
                    ("daemon's time", "served.seconds", Fmt::Secs),
                ],
            },
        ],
    },
    Page {
        name: "procs",
        tables: &[
            Table {
                title: "A VINO process against the same C on Linux, median of the rounds; `time / Linux` is VINO's time for the same work over Linux's (for the pipe, Linux's GB/s over VINO's), above 1 slower:",
                rows: "rows[]",
                across: None,
                columns: &[
                    ("measure", "measure", Fmt::Text),
                    ("unit", "unit", Fmt::Text),
                    ("VINO", "vino", Fmt::Ratio),
                    ("Linux", "linux", Fmt::Ratio),
                    ("time / Linux", "time_vs_linux", Fmt::Ratio),
                    ("goal", "goal", Fmt::Text),
                    ("met", "meets_goal", Fmt::Text),
                ],
            },
            Table {
                title: "The run:",
                rows: "",
                across: None,
                columns: &[
                    ("rounds", "rounds", Fmt::Count),
                    ("spawns", "spawns", Fmt::Count),
                    ("pipe bytes", "pipe_bytes", Fmt::Mib),
                    ("write size", "block_bytes", Fmt::Count),
                    ("round trips", "round_trips", Fmt::Count),
                    ("procs.wasm bytes", "procs_module_bytes", Fmt::Count),
                    ("true.wasm bytes", "true_module_bytes", Fmt::Count),
                    ("compiler", "clang", Fmt::Text),
                ],
            },
        ],
    },
    Page {
        name: "vm",
        tables: &[
            Table {
                title: "What a page fault costs on Linux, median of the rounds; `/ floor` is ns per page over the userfaultfd round trip's (the floor for a pager in user space), `/ one-CPU` over the round trip's with both threads on one CPU:",
                rows: "linux.rows[]",
                across: None,
                columns: VM_FAULT_COLUMNS,
            },
            Table {
                title: "The same work as a VINO process, its memory paged by the kernel (goal: each fault within 2x of the floor); major faults are the pager's swap-ins, minor its other faults:",
                rows: "vino_side.rows[]",
                across: None,
                columns: VM_FAULT_COLUMNS,
            },
            Table {
                title: "What paging costs a real program: SQLite and gzip as VINO processes, the kernel paging their memory against wasmtime's (goal: paged within 5% of unpaged), median of the rounds:",
                rows: "paging_cost.rows[]",
                across: None,
                columns: &[
                    ("step", "step", Fmt::Text),
                    ("paged", "paged_s", Fmt::Secs),
                    ("unpaged", "unpaged_s", Fmt::Secs),
                    ("paged / unpaged", "paged_vs_unpaged", Fmt::Ratio),
                    ("within 5%", "meets_goal", Fmt::Text),
                    ("pager faults", "pager_faults", Fmt::Count),
                    ("swap-ins", "swap_ins", Fmt::Count),
                ],
            },
            Table {
                title: "The run:",
                rows: "",
                across: None,
                columns: &[
                    ("rounds", "rounds", Fmt::Count),
                    ("touched", "touch_bytes", Fmt::Mib),
                    ("swap-in written", "swap_working_bytes", Fmt::Mib),
                    ("swap-in limit", "swap_limit_bytes", Fmt::Mib),
                    ("mapped file", "mapped_bytes", Fmt::Mib),
                    ("SQLite rows", "paging_cost.sqlite_rows", Fmt::Count),
                    ("gzip text", "paging_cost.text_bytes", Fmt::Mib),
                    ("resident limit", "paging_cost.resident_limit_bytes", Fmt::Mib),
                    ("compiler", "linux.clang", Fmt::Text),
                ],
            },
        ],
    },
    Page {
        name: "vm-latency",
        tables: &[
            Table {
                title: "Another user's fault latency, times of single-page touches in the program, medians of the rounds; `/ alone` is the median of each round's figure over the alone case's of the same round:",
                rows: "rows[]",
                across: None,
                columns: &[
                    ("neighbour", "neighbour", Fmt::Text),
                    ("first touch p50", "first_p50_ns", Fmt::Ns),
                    ("/ alone", "first_p50_vs_alone", Fmt::Ratio),
                    ("p99", "first_p99_ns", Fmt::Ns),
                    ("/ alone", "first_p99_vs_alone", Fmt::Ratio),
                    ("swap-in p50", "swap_p50_ns", Fmt::Ns),
                    ("/ alone", "swap_p50_vs_alone", Fmt::Ratio),
                    ("p99", "swap_p99_ns", Fmt::Ns),
                    ("/ alone", "swap_p99_vs_alone", Fmt::Ratio),
                ],
            },
            Table {
                title: "What held each neighbour in, per round: the most frames its memory held (sampled every 10 ms), its pages written to swap, its graft's calls and failures, how it ended, and the peak RSS of the process that holds the kernel:",
                rows: "rows[].containment_rounds[]",
                across: None,
                columns: &[
                    ("neighbour", "^key", Fmt::Text),
                    ("most frames", "max_resident_pages", Fmt::Count),
                    ("swapped out", "swap_outs", Fmt::Count),
                    ("graft calls", "graft_calls", Fmt::Count),
                    ("failed", "graft_failures", Fmt::Count),
                    ("unloaded", "graft_unloaded", Fmt::Text),
                    ("ended", "exit", Fmt::Text),
                    ("peak RSS", "peak_rss_bytes", Fmt::Mib),
                ],
            },
            Table {
                title: "The run:",
                rows: "",
                across: None,
                columns: &[
                    ("rounds", "rounds", Fmt::Count),
                    ("resident limit (pages)", "resident_limit_pages", Fmt::Count),
                    ("victim pages", "victim_pages", Fmt::Count),
                    ("neighbour pages", "hog_pages", Fmt::Count),
                    ("warm-up (ms)", "warmup_ms", Fmt::Count),
                    ("paged", "paged", Fmt::Text),
                ],
            },
        ],
    },
    Page {
        name: "vm-join",
        tables: &[
            Table {
                title: "The Wisconsin join in a program's own memory, median of the rounds; major faults waited for swap (VINO: the pager's reads of swap, Linux: getrusage's majflt), swap-ins are VINO's pages read back, `by graft` the evictions the graft chose:",
                rows: "rows[]",
                across: None,
                columns: &[
                    ("side", "side", Fmt::Text),
                    ("join", "seconds", Fmt::Secs),
                    ("major faults", "major_faults", Fmt::Count),
                    ("minor faults", "minor_faults", Fmt::Count),
                    ("swap-ins", "swap_ins", Fmt::Count),
                    ("by graft", "evicted_by_graft", Fmt::Count),
                    ("refused", "graft_refused", Fmt::Count),
                    ("time / default", "time_vs_default", Fmt::Ratio),
                    ("faults / default", "faults_vs_default", Fmt::Ratio),
                    ("time / Linux", "time_vs_linux", Fmt::Ratio),
                ],
            },
            Table {
                title: "Goals, beside the thesis' look-ahead runs over its LRU run (table 12, 1,024-4,096 records):",
                rows: "goals[]",
                across: None,
                columns: &[
                    ("what", "what", Fmt::Text),
                    ("measured", "measured", Fmt::Ratio),
                    ("thesis", "thesis", Fmt::Text),
                    ("goal", "goal", Fmt::Text),
                    ("met", "met", Fmt::Text),
                ],
            },
            Table {
                title: "The run:",
                rows: "",
                across: None,
                columns: &[
                    ("rounds", "rounds", Fmt::Count),
                    ("tuples per relation", "tuples", Fmt::Count),
                    ("relations", "relation_bytes", Fmt::Mib),
                    ("memory", "limit_bytes", Fmt::Mib),
                    ("look-ahead (keys)", "lookahead", Fmt::Count),
                    ("swap", "swap_bytes", Fmt::Mib),
                    ("Linux runs OOM-killed, run again", "linux_oom_kills", Fmt::Count),
                    ("compiler", "clang", Fmt::Text),
                ],
            },
        ],
    },
    Page {
        name: "sched",
        tables: &[
            Table {
                title: "(a) Proportional share: CPU by tickets:",
                rows: "shares[]",
                across: None,
                columns: &[
                    ("workers", "workers", Fmt::Count),
                    ("tickets", "tickets", Fmt::Count),
                    ("CPU", "cpu_s", Fmt::Secs),
                    ("share", "share", Fmt::Percent),
                    ("entitled", "entitled", Fmt::Percent),
                    ("error", "error", Fmt::Percent),
                ],
            },
            Table {
                title: "(b) Donation to a server:",
                rows: "donation[]",
                across: None,
                columns: &[
                    ("donation", "donation", Fmt::Text),
                    ("requests/s", "requests_per_s", Fmt::Count),
                    ("server CPU", "server_cpu", Fmt::Percent),
                    ("competitor CPU", "competitor_cpu", Fmt::Percent),
                ],
            },
            Table {
                title: "(c) The multimedia case: periodic audio threads beside video and another user:",
                rows: "multimedia[]",
                across: None,
                columns: &[
                    ("policy", "policy", Fmt::Text),
                    ("periods", "audio_periods", Fmt::Count),
                    ("missed", "audio_misses", Fmt::Count),
                    ("missed %", "miss_percent", Fmt::Ratio),
                    ("video CPU", "video_cpu", Fmt::Percent),
                    ("other CPU", "other_cpu", Fmt::Percent),
                ],
            },
            Table {
                title: "(d) Costs:",
                rows: "costs[]",
                across: None,
                columns: &[
                    ("what", "what", Fmt::Text),
                    ("cost", "ns", Fmt::Ns),
                    ("goal", "goal_ns", Fmt::Ns),
                ],
            },
        ],
    },
    Page {
        name: "soak",
        tables: &[Table {
            title: "The soak run:",
            rows: "",
            across: None,
            columns: &[
                ("clients", "clients", Fmt::Count),
                ("seconds", "secs", Fmt::Count),
                ("operations", "ops", Fmt::Count),
                ("records", "records", Fmt::Count),
                ("graft calls", "graft_invocations", Fmt::Count),
                ("problems", "problems", Fmt::Text),
            ],
        }],
    },
    Page {
        name: "syscalls",
        tables: &[Table {
            title: "What a system call costs, median (min-max) of the repetitions:",
            rows: "rows[]",
            across: None,
            columns: &[
                ("operation", "operation", Fmt::Text),
                ("path", "path", Fmt::Text),
                ("median", "median_ns", Fmt::Ns),
                ("min", "min_ns", Fmt::Ns),
                ("max", "max_ns", Fmt::Ns),
                ("vs Linux", "vs_linux", Fmt::Ratio),
                ("goal", "goal_ns", Fmt::Ns),
                ("met", "meets_goal", Fmt::Text),
            ],
        }],
    },
    Page {
        name: "wisconsin",
        tables: &[Table {
            title: "The Wisconsin selection, by device, policy (look-ahead eviction of N records, read-ahead of N blocks, or both) and protection; on the model, time is the modeled disk's:",
            rows: "devices[].runs[]",
            across: None,
            columns: &[
                ("device", "^kind", Fmt::Text),
                ("policy", "policy", Fmt::Text),
                ("protection", "protection", Fmt::Text),
                ("records or blocks", "param", Fmt::Count),
                ("look-ahead beside", "lookahead", Fmt::Count),
                ("order", "order", Fmt::Text),
                ("hits", "cache.hits", Fmt::Count),
                ("misses", "cache.misses", Fmt::Count),
                ("prefetched", "cache.prefetched", Fmt::Count),
                ("graft mistakes", "cache.graft_mistakes", Fmt::Count),
                ("time", "time_ns", Fmt::Ns),
                ("graft time", "graft.time_ns", Fmt::Ns),
                ("device reads", "device_reads", Fmt::Count),
            ],
        }],
    },
    Page {
        name: "execverify",
        tables: &[Table {
            title: "exec.verify (`sha256_allow.c` through `Process::exec_verify`) against `sha256sum` on the same bytes; \
                    MB/s at the median round (slowest-fastest), and the median of each round's time ratio:",
            rows: "rows[]",
            across: None,
            columns: &[
                ("input", "input", Fmt::Text),
                ("bytes", "bytes", Fmt::Count),
                ("rounds", "rounds", Fmt::Count),
                ("exec.verify MB/s", "verify_mb_s", Fmt::Ratio),
                ("min", "verify_mb_s_min", Fmt::Ratio),
                ("max", "verify_mb_s_max", Fmt::Ratio),
                ("sha256sum MB/s", "sha256sum_mb_s", Fmt::Ratio),
                ("min", "sha256sum_mb_s_min", Fmt::Ratio),
                ("max", "sha256sum_mb_s_max", Fmt::Ratio),
                ("exec.verify time / sha256sum", "time_ratio_median", Fmt::Times),
            ],
        }],
    },
    Page {
        name: "layers",
        tables: &[Table {
            title: "Stream layers on a loopback connection between two users' processes (MB/s, medians of the \
                    repetitions; each case over the plain connection in the same run):",
            rows: "rows[]",
            across: None,
            columns: &[
                ("layers (top first)", "layers", Fmt::Text),
                ("MB/s", "mb_s", Fmt::Ratio),
                ("min", "mb_s_min", Fmt::Ratio),
                ("max", "mb_s_max", Fmt::Ratio),
                ("over plain", "ratio", Fmt::Ratio),
            ],
        }],
    },
    Page {
        name: "congestion",
        tables: &[Table {
            title: "Reno and CUBIC as `net.congestion` grafts against the built-ins, 1% loss (goodput in simulated \
                    time, Mbit/s; a call's time in the graft, medians of the repetitions):",
            rows: "rows[]",
            across: None,
            columns: &[
                ("controller", "controller", Fmt::Text),
                ("graft", "graft", Fmt::Text),
                ("built-in Mbit/s", "builtin_mbit", Fmt::Ratio),
                ("graft Mbit/s", "graft_mbit", Fmt::Ratio),
                ("graft / built-in", "ratio", Fmt::Ratio),
                ("same windows", "same_trace", Fmt::Text),
                ("graft calls", "calls", Fmt::Count),
                ("per call", "per_call_ns", Fmt::Ns),
                ("machine, built-in", "builtin_ms", Fmt::Ms),
                ("machine, graft", "graft_ms", Fmt::Ms),
                ("goal met", "meets_goal", Fmt::Text),
            ],
        }],
    },
    Page {
        name: "serve",
        tables: &[Table {
            title: "A server in the kernel (`http_server.c`) against the same server as a VINO process (`httpd.c`) and \
                    nginx, 8 keep-alive clients, where the notes say (medians of the repetitions):",
            rows: "rows[]",
            across: None,
            columns: &[
                ("server", "server", Fmt::Text),
                ("file", "file", Fmt::Text),
                ("requests/s", "requests_per_sec", Fmt::Count),
                ("p50", "p50_us", Fmt::Us),
                ("p99", "p99_us", Fmt::Us),
                ("vs process", "vs_process", Fmt::Ratio),
            ],
        }],
    },
    Page {
        name: "names",
        tables: &[Table {
            title: "What a bound graft adds to a walk step and to an open, by a process of another user than the \
                    tree's owner (medians over short turns; the additions from each turn's difference against the \
                    ungrafted case of the same turn):",
            rows: "rows[]",
            across: None,
            columns: &[
                ("bound", "label", Fmt::Text),
                ("deep stat (11 steps)", "stat_ns", Fmt::Ns),
                ("open+close", "open_ns", Fmt::Ns),
                ("added per step", "per_step_ns", Fmt::Ns),
                ("added per open", "per_open_ns", Fmt::Ns),
                ("goal met", "meets_goal", Fmt::Text),
            ],
        }],
    },
    Page {
        name: "try",
        tables: &[
            Table {
                title: "E4's query with the look-ahead graft tried in shadow beside LRU, then bound (medians of the rounds):",
                rows: "runs[]",
                across: None,
                columns: &[
                    ("run", "what", Fmt::Text),
                    ("misses", "misses", Fmt::Count),
                    ("would-be misses", "would_be_misses", Fmt::Count),
                    ("time", "wall_ns", Fmt::Ns),
                ],
            },
            Table {
                title: "Goals:",
                rows: "",
                across: None,
                columns: &[
                    (
                        "would-be misses against misses when bound (goal: within 2%)",
                        "would_be_error",
                        Fmt::Percent,
                    ),
                    (
                        "query time with the shadow / LRU alone (goal: at most 1.10)",
                        "shadow_time_ratio",
                        Fmt::Ratio,
                    ),
                    (
                        "candidate's time a decision",
                        "tried.candidate_ns_per_decision",
                        Fmt::Ns,
                    ),
                    ("accesses the queue dropped", "tried.queue_drops", Fmt::Count),
                ],
            },
            Table {
                title: "The bound graft recorded over the whole query and replayed offline:",
                rows: "",
                across: None,
                columns: &[
                    ("invocations", "replay.invocations", Fmt::Count),
                    ("bytes", "replay.bytes", Fmt::Count),
                    ("bytes an invocation", "replay.bytes_per_invocation", Fmt::Ratio),
                    ("replayed a second", "replay.rate", Fmt::Count),
                    ("every answer again", "replay.exact", Fmt::Text),
                    ("recorded / unrecorded query time", "record_time_ratio", Fmt::Ratio),
                ],
            },
            Table {
                title: "Modules replayed offline on the ghost of the recording's page accesses, against the misses \
                        measured live:",
                rows: "",
                across: None,
                columns: &[
                    ("accesses recorded", "replay.accesses", Fmt::Count),
                    ("look-ahead, would-be", "replay.ghost_lookahead_misses", Fmt::Count),
                    ("against it bound", "ghost_error", Fmt::Percent),
                    ("LRU module, would-be", "replay.ghost_lru_misses", Fmt::Count),
                    ("against LRU live", "ghost_lru_error", Fmt::Percent),
                    ("time a replay", "replay.ghost_ns", Fmt::Ns),
                ],
            },
        ],
    },
    Page {
        name: "pick",
        tables: &[
            Table {
                title: "A user's ping behind its own eight bulk connections, A's way out at 2 MB/s shared with another \
                        user (one-way delay in simulated time):",
                rows: "pings[]",
                across: None,
                columns: &[
                    ("order within the user's share", "policy", Fmt::Text),
                    ("p50", "p50_us", Fmt::Us),
                    ("p99", "p99_us", Fmt::Us),
                    ("other user / pinging user", "other_share", Fmt::Ratio),
                ],
            },
            Table {
                title: "Two users sharing the rated link (bytes after the first simulated second):",
                rows: "shares[]",
                across: None,
                columns: &[
                    ("case", "case", Fmt::Text),
                    ("first MB/s", "first_mb", Fmt::Ratio),
                    ("second MB/s", "second_mb", Fmt::Ratio),
                    ("second / first", "ratio", Fmt::Ratio),
                    ("tickets say", "expected", Fmt::Ratio),
                    ("fair", "met", Fmt::Text),
                ],
            },
        ],
    },
    Page {
        name: "net",
        tables: &[
            Table {
                title: "Goals, as ratios within a round (medians of the rounds):",
                rows: "goals[]",
                across: None,
                columns: &[
                    ("ratio", "what", Fmt::Text),
                    ("measured", "measured", Fmt::Ratio),
                    ("goal", "goal", Fmt::Text),
                    ("met", "met", Fmt::Text),
                ],
            },
            Table {
                title: "Each case over the link, MTU 1500 (medians of the rounds):",
                rows: "rows[]",
                across: None,
                columns: &[
                    ("case", "case", Fmt::Text),
                    ("path", "path", Fmt::Text),
                    ("Mbit/s", "mbit_s", Fmt::Ratio),
                    ("p50", "p50_us", Fmt::Us),
                    ("p99", "p99_us", Fmt::Us),
                ],
            },
        ],
    },
    Page {
        name: "rollback",
        tables: &[
            Table {
                title: "Goals: rollback on over off, medians of the per-round ratios:",
                rows: "goals[]",
                across: None,
                columns: &[
                    ("what", "what", Fmt::Text),
                    ("goal (at most)", "goal", Fmt::Times),
                    ("measured", "measured", Fmt::Times),
                    ("met", "met", Fmt::Text),
                ],
            },
            Table {
                title: "Calls through the `toy.apply` graftpoint, rollback on and off (ns per call, medians of the \
                        rounds; added and on / off: medians of each round's difference and ratio):",
                rows: "calls[]",
                across: None,
                columns: &[
                    ("graft", "graft", Fmt::Text),
                    ("words stored", "words", Fmt::Count),
                    ("rollback off", "off_ns", Fmt::Ns),
                    ("rollback on", "on_ns", Fmt::Ns),
                    ("added", "added_ns", Fmt::Ns),
                    ("on / off", "ratio", Fmt::Times),
                ],
            },
            Table {
                title: "Failed calls (the graft answers -1, which `toy.apply` refuses), rollback on and off:",
                rows: "aborts[]",
                across: None,
                columns: &[
                    ("graft", "graft", Fmt::Text),
                    ("undo records", "words", Fmt::Count),
                    ("rollback off", "off_ns", Fmt::Ns),
                    ("rollback on", "on_ns", Fmt::Ns),
                    ("added", "added_ns", Fmt::Ns),
                    ("on / off", "ratio", Fmt::Times),
                ],
            },
            Table {
                title: "Per word and per record (least-squares slopes over 1-1000 words and 0-1000 records):",
                rows: "",
                across: None,
                columns: &[
                    ("store, rollback on", "slopes.write_on_ns_per_word", Fmt::Ns),
                    ("store, rollback off", "slopes.write_off_ns_per_word", Fmt::Ns),
                    ("logging adds per word", "slopes.added_ns_per_word", Fmt::Ns),
                    (
                        "a record adds to a failed call",
                        "slopes.abort_added_ns_per_record",
                        Fmt::Ns,
                    ),
                    ("of which replaying it", "slopes.replay_ns_per_record", Fmt::Ns),
                ],
            },
            Table {
                title: "Graft-callable functions that change kernel state, each at its graftpoint: a graft calling it \
                        once against the same graft without the call (ns per kernel call through the slot, rollback \
                        on), committed and then trapping:",
                rows: "functions[]",
                across: None,
                columns: &[
                    ("function", "function", Fmt::Text),
                    ("graftpoint", "graftpoint", Fmt::Text),
                    ("without", "committed.off_ns", Fmt::Ns),
                    ("with", "committed.on_ns", Fmt::Ns),
                    ("the call adds", "committed.added_ns", Fmt::Ns),
                    ("trapping: without", "aborted.off_ns", Fmt::Ns),
                    ("trapping: with", "aborted.on_ns", Fmt::Ns),
                    ("trapping: the call adds", "aborted.added_ns", Fmt::Ns),
                ],
            },
            Table {
                title: "E3's hot-list module through wasmtime, as built against instrumented, on one engine:",
                rows: "hot_list[]",
                across: None,
                columns: &[
                    ("interrupt", "interrupt", Fmt::Text),
                    ("call", "call", Fmt::Text),
                    ("as built", "off_ns", Fmt::Ns),
                    ("instrumented", "on_ns", Fmt::Ns),
                    ("added", "added_ns", Fmt::Ns),
                    ("instrumented / as built", "ratio", Fmt::Times),
                ],
            },
        ],
    },
    Page {
        name: "streams",
        tables: &[
            Table {
                title: "Stream codecs on 64 KiB chunks: Wasm through `Codec` against the same C native (each chunk's median \
                        over the rounds, summed):",
                rows: "codecs[]",
                across: None,
                columns: &[
                    ("codec", "codec", Fmt::Text),
                    ("corpus", "corpus", Fmt::Text),
                    ("op", "op", Fmt::Text),
                    ("Wasm MB/s", "wasm_mb_s", Fmt::Ratio),
                    ("native MB/s", "native_mb_s", Fmt::Ratio),
                    ("Wasm / native", "wasm_vs_native", Fmt::Ratio),
                    ("stored / plain", "stored_ratio", Fmt::Ratio),
                    ("raw chunks", "raw_chunks", Fmt::Count),
                ],
            },
            Table {
                title: "The corpora:",
                rows: "corpora[]",
                across: None,
                columns: &[
                    ("corpus", "name", Fmt::Text),
                    ("bytes", "bytes", Fmt::Count),
                    ("chunks", "chunks", Fmt::Count),
                    ("from", "source", Fmt::Text),
                ],
            },
            Table {
                title: "Whole files through the kernel (both corpora, one file each): write and fsync, then read back \
                        cold; MB/s median, slowest and fastest of the rounds; `/ plain` is the median over the rounds \
                        of the case's MB/s over its system's uncompressed case's in the same round:",
                rows: "kernel.rows[]",
                across: None,
                columns: &[
                    ("system", "system", Fmt::Text),
                    ("codec", "codec", Fmt::Text),
                    ("write MB/s", "write_mb_s", Fmt::Ratio),
                    ("min", "write_min_mb_s", Fmt::Ratio),
                    ("max", "write_max_mb_s", Fmt::Ratio),
                    ("write / plain", "write_vs_plain", Fmt::Ratio),
                    ("read MB/s", "read_mb_s", Fmt::Ratio),
                    ("min", "read_min_mb_s", Fmt::Ratio),
                    ("max", "read_max_mb_s", Fmt::Ratio),
                    ("read / plain", "read_vs_plain", Fmt::Ratio),
                    ("stored / plain", "stored_ratio", Fmt::Ratio),
                    ("device writes", "write_device.writes", Fmt::Count),
                    ("device reads", "read_device.reads", Fmt::Count),
                ],
            },
            Table {
                title: "The kernel path's run:",
                rows: "",
                across: None,
                columns: &[
                    ("rounds", "kernel.rounds", Fmt::Count),
                    ("bytes per case", "kernel.bytes", Fmt::Count),
                    ("O_DIRECT", "kernel.direct", Fmt::Text),
                    ("VINO cache frames", "kernel.cache_frames", Fmt::Count),
                    ("load before", "kernel.load_before", Fmt::Text),
                    ("load after", "kernel.load_after", Fmt::Text),
                ],
            },
            Table {
                title: "Compressed sizes of the same bytes:",
                rows: "kernel.compression[]",
                across: None,
                columns: &[
                    ("corpus", "corpus", Fmt::Text),
                    ("what", "what", Fmt::Text),
                    ("bytes", "bytes", Fmt::Count),
                    ("/ plain", "ratio", Fmt::Ratio),
                    ("/ lz4 -B4", "vs_lz4_64k", Fmt::Ratio),
                ],
            },
        ],
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nested_rows_reach_their_parents() {
        let doc = json!({"a": [{"name": "x", "b": [{"v": 1}, {"v": 2}]}, {"name": "y", "b": [{"v": 3}]}]});
        let table = Table {
            title: "t",
            rows: "a[].b[]",
            across: None,
            columns: &[("n", "^name", Fmt::Text), ("v", "v", Fmt::Count)],
        };
        let out = render_table(&doc, &table).unwrap();
        assert!(out.contains("| x | 1 |\n| x | 2 |\n| y | 3 |\n"), "{out}");
    }

    #[test]
    fn a_pivot_has_a_column_per_value() {
        let doc = json!({"r": [{"k": "a", "op": "x", "v": 1, "w": 2}, {"k": "a", "op": "y", "v": 3, "w": 4}, {"k": "b", "op": "y", "v": 5, "w": 6}]});
        let columns: &[Column] = &[("key", "k", Fmt::Text), ("v", "v", Fmt::Count), ("w", "w", Fmt::Count)];
        let table = Table {
            title: "t",
            rows: "r[]",
            across: Some("op"),
            columns,
        };
        let out = render_table(&doc, &table).unwrap();
        assert!(out.contains("| key | x | y |\n"), "{out}");
        assert!(out.contains("| a | 1 (2) | 3 (4) |\n| b | – | 5 (6) |\n"), "{out}");
    }

    #[test]
    fn splice_replaces_only_the_region() {
        let page = format!("head\n{}\nold\n{END_MARKER}\ntail\n", begin_marker("x"));
        let out = splice(&page, "x", "new\n").unwrap();
        assert_eq!(
            out,
            format!("head\n{}\n\nnew\n\n{END_MARKER}\ntail\n", begin_marker("x"))
        );
        assert_eq!(splice(&out, "x", "new\n").unwrap(), out, "splicing is idempotent");
    }
}
